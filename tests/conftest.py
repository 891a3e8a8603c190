"""Shared fixtures: one real redis-server per test session, flushed between tests.

Without a GPU, Triton kernels run under the Triton interpreter. TRITON_INTERPRET has to be
set before triton itself is imported, not only before the kernel modules: `triton.language`'s
own `@triton.jit` helpers (the combine functions of `tl.max`, `tl.sum`, ...) are decorated at
that import, and a kernel interpreted later cannot call a compiled one. transformers and vLLM
import triton, so this root conftest, which pytest loads before any test module, sets it
(`import torch` does not import triton).

Every service requires a credential, in tests too: this conftest makes one token per role for
the test session and exports ETUDE_AUTH__TOKENS_DIR before any settings are read, so services
started in-process or as subprocesses check against them and clients present them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import torch

from etude.common.auth import write_tokens
from etude.common.redis_server import RedisServer
from etude.sandbox.bwrap import SandboxUnavailableError
from etude.sandbox.limits import CgroupSupport

_TOKENS_DIR = tempfile.mkdtemp(prefix="etude-test-tokens-")
atexit.register(shutil.rmtree, _TOKENS_DIR, ignore_errors=True)
write_tokens(Path(_TOKENS_DIR))
os.environ["ETUDE_AUTH__TOKENS_DIR"] = _TOKENS_DIR
os.environ.pop("ETUDE_AUTH__ROLES", None)
os.environ.pop("ETUDE_AUTH__REQUIRED", None)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@contextlib.contextmanager
def skip_without_sandboxes() -> Iterator[None]:
    """Skips the test where its body finds that this host cannot run bubblewrap sandboxes
    (no bwrap, or no user namespaces for it)."""
    try:
        yield
    except SandboxUnavailableError as error:
        pytest.skip(f"this host cannot run bubblewrap sandboxes: {error}")


@pytest.fixture
def cgroups() -> CgroupSupport:
    """Where this host lets sandboxes make cgroups; skips a test that needs cgroups where
    the tree is not writable (a host capability, like a GPU)."""
    support = CgroupSupport.detect()
    if support.version == 0:
        pytest.skip("needs a writable cgroup tree (v2, or v1 memory + pids)")
    return support


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(data_dir=tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own, for tests that kill or restart it."""
    server = RedisServer(data_dir=tmp_path / "redis").start()
    yield server
    server.stop()
