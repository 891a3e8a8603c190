"""Fixtures for the environment: a small repository and a session manager on real bwrap."""

from __future__ import annotations

from pathlib import Path

import pytest

from etude.environment.config import EnvironmentConfig
from etude.environment.sandbox.bwrap import SandboxUnavailableError
from etude.environment.sessions import SessionManager

MIB = 1024 * 1024


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "README.md").write_text("# demo\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "notes.txt").write_text("one\ntwo\nthree\n")
    return root


def make_config(tmp_path: Path, **overrides) -> EnvironmentConfig:
    defaults = {
        "root_dir": tmp_path / "environment",
        # Sessions open repositories built under tmp_path (the environment's own root_dir
        # inside it stays refused).
        "repository_roots": (tmp_path,),
        "file_size_bytes": 16 * MIB,
        "processes": 64,
        "memory_bytes": 1024 * MIB,
        "address_space_bytes": 2048 * MIB,
    }
    return EnvironmentConfig(**{**defaults, **overrides})


@pytest.fixture
def config(tmp_path: Path) -> EnvironmentConfig:
    return make_config(tmp_path)


@pytest.fixture
async def manager(config: EnvironmentConfig):
    try:
        manager = SessionManager(config)
    except SandboxUnavailableError as error:
        pytest.skip(f"this host cannot run bubblewrap sandboxes: {error}")
    yield manager
    await manager.close_all()
