"""What a killed grader leaves (its scratch copies, its test run's cgroup and the processes
in it) is reclaimed when a reward service starts; what a live grader owns stays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from etude.reward.config import RewardConfig
from etude.reward.grader import SCRATCH_DIR, reclaim_leftovers
from etude.sandbox.limits import CgroupSupport
from etude.sandbox.reclaim import owned_dir
from etude.tasks.testrun import GRADING_CGROUPS

# A grader as far as leftovers go: its scratch directory with a copy in it, a test run's
# cgroup holding a process of the run; then it waits to be killed.
GRADER = """
import os, subprocess, sys, time
from pathlib import Path
from etude.sandbox.reclaim import owned_dir

scratch = owned_dir(Path(sys.argv[1])) / "etude-grade-x" / "repo"
scratch.mkdir(parents=True)
(scratch / "module.py").write_text("x = 1\\n")
run = subprocess.Popen(["sleep", "600"], start_new_session=True)
for parent in sys.argv[2:]:
    cgroup = Path(parent) / f"etude-grade-{os.getpid()}-abc"
    cgroup.mkdir()
    (cgroup / "cgroup.procs").write_text(str(run.pid))
print(run.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.integration
def test_a_killed_graders_scratch_and_run_are_reclaimed(tmp_path):
    support = CgroupSupport.detect()
    parents = [str(p) for p in support.parents.values()] if support.version else []
    cache = tmp_path / "cache"
    mine = owned_dir(cache / SCRATCH_DIR) / "etude-grade-live"  # this process: a live grader
    mine.mkdir()
    grader = subprocess.Popen(
        [sys.executable, "-c", GRADER, str(cache / SCRATCH_DIR), *parents],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    run_pid = int(grader.stdout.readline())
    os.kill(grader.pid, signal.SIGKILL)
    grader.wait()
    leftovers = [d for d in (cache / SCRATCH_DIR).iterdir() if d.name.startswith(f"{grader.pid}.")]
    assert leftovers and _alive(run_pid)  # what the test is about is really there

    found = reclaim_leftovers(RewardConfig(cache_dir=cache))

    assert not any(d.exists() for d in leftovers)
    assert found.directories >= 1
    assert mine.is_dir()  # a live grader's scratch stays
    if parents:
        assert found.cgroups >= 1
        assert not list(Path(parents[0]).glob(f"{GRADING_CGROUPS}{grader.pid}-*"))
        deadline = time.monotonic() + 5
        while _alive(run_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(run_pid)
    else:
        os.kill(run_pid, signal.SIGKILL)  # no cgroup tree: the run is not ours to find
