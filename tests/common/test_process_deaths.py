"""Why a process ended: the exit code or signal in words, and the kernel's out-of-memory
killer named when it was the cause (a real OOM kill, caused in a memory-limited cgroup)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from etude.common.process_deaths import ended_because, memory_note, oom_kills
from etude.sandbox.limits import CgroupSupport

GREEDY = "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))\n"


def test_exit_codes_and_signals_in_words():
    assert ended_because(0) == "exited with code 0"
    assert ended_because(3) == "exited with code 3"
    assert ended_because(-signal.SIGKILL) == "was killed by SIGKILL"
    assert ended_because(-signal.SIGTERM) == "was killed by SIGTERM"


def _memory_cgroup(support: CgroupSupport, limit: int) -> Path:
    if support.version == 2:
        group = support.parents["unified"] / f"etude-oom-test-{os.getpid()}"
        group.mkdir()
        (group / "memory.max").write_text(str(limit))
        (group / "memory.swap.max").write_text("0")
    else:
        group = support.parents["memory"] / f"etude-oom-test-{os.getpid()}"
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit))
    return group


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="the kernel log is not readable")
def test_a_process_the_oom_killer_ended_is_named_with_the_cause(cgroups):
    group = _memory_cgroup(cgroups, 64 << 20)
    try:
        greedy = subprocess.Popen(
            [sys.executable, "-c", GREEDY],
            preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
        )
        assert greedy.wait(timeout=60) == -signal.SIGKILL
        assert ended_because(greedy.returncode) == "was killed by SIGKILL"
        deadline = time.monotonic() + 5
        while not any(k.pid == greedy.pid for k in oom_kills(60)):
            assert time.monotonic() < deadline, "the kernel logged no OOM kill"
            time.sleep(0.1)
        [kill] = [k for k in oom_kills(60) if k.pid == greedy.pid]
        assert kill.command.startswith("python") and 0 <= kill.seconds_ago < 60
        note = memory_note(60)
        assert "ran out of memory" in note and f"(pid {greedy.pid})" in note
    finally:
        group.rmdir()
    # Long ago is not now: a window that ends before the kill does not name it.
    time.sleep(1.5)
    assert not any(k.pid == greedy.pid for k in oom_kills(1))
