"""Fixtures for the environment: a small repository and a session manager on real bwrap."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.environment.client import GrpcEnvironment
from etude.environment.config import EnvironmentConfig
from etude.environment.server import registration
from etude.environment.sessions import SessionManager
from etude.sandbox.config import SandboxConfig
from tests.conftest import skip_without_sandboxes
from tests.sandbox.conftest import repo, small_sandbox

__all__ = ["make_config", "make_manager", "repo", "serving"]  # `repo`: the sandbox tests' fixture


def make_config(tmp_path: Path, **overrides) -> EnvironmentConfig:
    defaults = {
        "root_dir": tmp_path / "environment",
        # Sessions open repositories built under tmp_path (the environment's own root_dir
        # inside it stays refused).
        "repository_roots": (tmp_path,),
    }
    return EnvironmentConfig(**{**defaults, **overrides})


def make_manager(tmp_path: Path, *, search=None, observer=None, **overrides) -> SessionManager:
    """A session manager on real sandboxes with small limits; each of `overrides` is a
    field of `EnvironmentConfig` or of `SandboxConfig`."""
    sandbox = {k: overrides.pop(k) for k in list(overrides) if k in SandboxConfig.model_fields}
    return SessionManager(
        make_config(tmp_path, **overrides), small_sandbox(**sandbox), search, observer
    )


@pytest.fixture
async def manager(tmp_path: Path):
    with skip_without_sandboxes():
        manager = make_manager(tmp_path)
    yield manager
    await manager.close_all()


@contextlib.asynccontextmanager
async def serving(manager: SessionManager) -> AsyncIterator[tuple[GrpcEnvironment, ServiceRuntime]]:
    """A real environment server for `manager` on loopback, and a gRPC client of it (the
    caller closes the manager)."""
    runtime = ServiceRuntime(
        "environment", GrpcSettings(drain_seconds=0, grace_seconds=1), [registration(manager)]
    )
    await runtime.start()
    client = GrpcEnvironment(runtime.address, ClientSettings(timeout_seconds=60))
    try:
        yield client, runtime
    finally:
        await client.close()
        await runtime.shutdown()
