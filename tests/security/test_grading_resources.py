"""Patches that make grading pay in disk: a few MB of patch that inflate to a GiB when
applied, and code under test that fills the workspace. Each is submitted to a real reward
service over gRPC and graded in real sandboxes; neither may write that much to the host,
and the service still grades a real fix after."""

from __future__ import annotations

import asyncio
import base64
import shutil
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.reward_service import (
    PACKAGE,
    assert_gold_scores_one,
    init_with,
    reward_service,
    score,
)
from tests.tasks.conftest import bwrap  # noqa: F401

pytestmark = pytest.mark.integration

MIB = 1024**2
WORKSPACE_BYTES = 128 * MIB


@pytest.fixture(scope="module")
def service(tmp_path_factory, bwrap) -> Iterator[str]:  # noqa: F811
    yield from reward_service(tmp_path_factory, bwrap, workspace_bytes=WORKSPACE_BYTES)


def inflating_patch(path: str, inflated: int) -> str:
    """A new binary file of `inflated` zero bytes, as `GIT binary patch` writes it: its
    deflated data is about a thousandth of that."""
    compressor = zlib.compressobj(9)
    chunk = bytes(MIB)
    data = b"".join(compressor.compress(chunk) for _ in range(inflated // MIB))
    data += compressor.flush()
    lines = []
    for start in range(0, len(data), 52):
        piece = data[start : start + 52]
        marker = (
            chr(ord("A") + len(piece) - 1) if len(piece) <= 26 else chr(ord("a") + len(piece) - 27)
        )
        lines.append(marker + base64.b85encode(piece).decode())
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..1111111\n"
        f"GIT binary patch\nliteral {inflated}\n" + "\n".join(lines) + "\n\nliteral 0\n"
        "HcmV?d00001\n\n"
    )


def _length_marker(length: int) -> str:
    """git's base85 line prefix: `A`–`Z` for 1–26 bytes, `a`–`z` for 27–52."""
    return chr(ord("A") + length - 1) if length <= 26 else chr(ord("a") + length - 27)


class _DiskWatch:
    """The most the filesystems of /tmp and of the service's scratch grew while it ran."""

    def __init__(self, *paths: Path) -> None:
        self.paths = paths
        self.start = {p: shutil.disk_usage(p).used for p in paths}
        self.peak = 0

    async def run(self) -> None:
        while True:
            for path in self.paths:
                self.peak = max(self.peak, shutil.disk_usage(path).used - self.start[path])
            await asyncio.sleep(0.05)


async def graded_watching(address: str, patch: str):
    watch = _DiskWatch(Path(tempfile.gettempdir()), Path.cwd())
    watcher = asyncio.ensure_future(watch.run())
    started = time.monotonic()
    try:
        reply = await score(address, patch)
    finally:
        watcher.cancel()
    return reply, watch.peak, time.monotonic() - started


async def test_a_patch_that_inflates_to_a_gib_is_refused_before_it_is_written(service):
    patch = inflating_patch(f"{PACKAGE}/blob.bin", 1024 * MIB)
    assert len(patch) < 3 * MIB
    reply, grew, seconds = await graded_watching(service, patch)
    assert reply.reward == 0.0 and "would write more than" in reply.error
    assert grew < 64 * MIB, grew
    assert seconds < 30
    await assert_gold_scores_one(service)


FILL_THE_WORKSPACE = """
import os as _os

try:
    with open(_os.path.join(_os.path.dirname(__file__), "fill.bin"), "wb") as _f:
        for _ in range(1024):
            _f.write(b"x" * (1 << 20))
            _f.flush()
except OSError:
    pass
"""


async def test_code_under_test_fills_only_the_sandboxs_workspace(service):
    reply, grew, _seconds = await graded_watching(service, init_with(FILL_THE_WORKSPACE))
    assert reply.reward == 0.0
    assert grew < 64 * MIB, grew  # a GiB written, none of it on the host's disks
    await assert_gold_scores_one(service)
