"""Fixtures for the sandbox: a small repository and real sandboxes over it (bwrap, with an
overlay workspace where bwrap supports one, as the environment makes them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from etude.sandbox.bwrap import check_bwrap_works, configured_bwrap
from etude.sandbox.config import SandboxConfig
from etude.sandbox.limits import CgroupSupport
from etude.sandbox.sandbox import Sandbox
from etude.sandbox.types import Layout
from tests.conftest import skip_without_sandboxes

MIB = 1024 * 1024


def small_sandbox(**overrides) -> SandboxConfig:
    """Limits small enough that a test breaching them stays cheap."""
    defaults = {
        "file_size_bytes": 16 * MIB,
        "processes": 64,
        "memory_bytes": 1024 * MIB,
        "address_space_bytes": 2048 * MIB,
    }
    return SandboxConfig(**{**defaults, **overrides})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "README.md").write_text("# demo\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "notes.txt").write_text("one\ntwo\nthree\n")
    return root


@pytest.fixture
def sandbox_config() -> SandboxConfig:
    return small_sandbox()


@pytest.fixture
async def open_sandbox(tmp_path: Path, repo: Path, sandbox_config: SandboxConfig):
    """Starts a sandbox over `repo` (each call a workspace of its own); stops them all."""
    with skip_without_sandboxes():
        bwrap = configured_bwrap(sandbox_config)
        assert bwrap is not None
        check_bwrap_works(bwrap)
    cgroups = CgroupSupport.detect()
    started: list[Sandbox] = []

    async def open_one() -> Sandbox:
        session_dir = tmp_path / "sessions" / f"s{len(started)}"
        if bwrap.supports_overlay:
            layout = Layout("overlay", session_dir, repo, lowers=[repo])
            layout.upper.mkdir(parents=True)
            layout.work.mkdir()
        else:
            layout = Layout("copy", session_dir, repo)
            shutil.copytree(repo, layout.tree, symlinks=True)
        sandbox = Sandbox(session_dir.name, layout, sandbox_config, bwrap, cgroups)
        started.append(sandbox)
        await sandbox.start()
        return sandbox

    yield open_one
    for sandbox in started:
        await sandbox.stop()


@pytest.fixture
async def sandbox(open_sandbox) -> Sandbox:
    return await open_sandbox()
