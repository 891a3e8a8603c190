"""Reclaiming what a killed process left (etude.sandbox.reclaim): owners told apart by pid,
start time and boot; real cgroups emptied and removed only when their owner is gone; an
owner's directory and the processes its records name, after a real SIGKILL."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from etude.sandbox.limits import CgroupSupport, SessionCgroup, limited
from etude.sandbox.reclaim import (
    CGROUP_PARENTS,
    Owner,
    Reclaimed,
    owned_dir,
    owner_of_cgroup,
    reclaim_cgroups,
    reclaim_owned_dirs,
    remove_tree,
)
from tests.sandbox.conftest import small_sandbox


def alive(pid: int) -> bool:
    return Owner.of(pid) is not None


def wait_gone(pids: list[int], timeout: float = 5) -> list[int]:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def dead_owner() -> Owner:
    """The owner token of a real process that has exited."""
    child = subprocess.Popen(["sleep", "60"])
    owner = Owner.of(child.pid)
    child.kill()
    child.wait()
    assert owner is not None and not owner.alive()
    return owner


def test_owners_are_told_apart_by_pid_start_time_and_boot():
    me = Owner.current()
    assert me.alive() and Owner.parse(me.token) == me
    assert not dead_owner().alive()
    # The same pid started at another time, or on another boot, is another process.
    assert not Owner(me.pid, me.start + 1, me.boot).alive()
    assert not Owner(me.pid, me.start, "0" * 12).alive()
    assert Owner(me.pid).alive()  # a pid alone: judged by the pid
    for junk in ("se-0193", "1.2", "a.b.c", "1.2.", "-1.2.x", ""):
        assert Owner.parse(junk) is None


def test_a_cgroup_name_gives_its_owner():
    me = Owner.current()
    assert owner_of_cgroup(f"0193ab@{me.token}") == me
    assert owner_of_cgroup("4242-a1b2c3") == Owner(4242)  # etude.tasks.testrun's names
    assert owner_of_cgroup("0193ab") is None  # no owner: never reclaimed
    assert owner_of_cgroup("0193ab@junk") is None


def test_only_cgroups_of_owners_that_are_gone_are_emptied_and_removed(cgroups):
    prefix = f"etude-test-{secrets.token_hex(4)}-"
    dead, me = dead_owner(), Owner.current()
    names = {
        "dead": f"{prefix}a@{dead.token}",
        "dead_pid": f"{prefix}{dead.pid}-b",
        "live": f"{prefix}c@{me.token}",
        "unknown": f"{prefix}d",
    }
    config = small_sandbox()
    made = {key: SessionCgroup(cgroups, name, config) for key, name in names.items()}
    # A process in each, one of them with a child that left its session.
    script = "setsid sleep 1000 & sleep 1000 & wait"
    started = {
        key: subprocess.Popen(limited(["bash", "-c", script], config, cgroup))
        for key, cgroup in made.items()
    }
    try:
        deadline = time.monotonic() + 5
        while any(len(c.pids()) < 3 for c in made.values()) and time.monotonic() < deadline:
            time.sleep(0.02)
        inside = {key: cgroup.pids() for key, cgroup in made.items()}
        assert all(len(pids) == 3 for pids in inside.values()), inside

        found = reclaim_cgroups(prefix)

        assert found == Reclaimed(cgroups=2, processes=6)
        assert wait_gone(inside["dead"] + inside["dead_pid"]) == []
        for key in ("dead", "dead_pid"):
            assert not any(d.exists() for d in made[key].dirs)
            assert started[key].wait(5) == -signal.SIGKILL
        for key in ("live", "unknown"):
            assert all(d.is_dir() for d in made[key].dirs)
            assert all(alive(p) for p in inside[key])
        assert reclaim_cgroups(prefix) == Reclaimed()  # nothing twice
    finally:
        for cgroup in made.values():
            cgroup.remove()
        for process in started.values():
            process.wait(5)


def test_a_killed_owners_cgroups_are_found_where_it_wrote_it_made_them(tmp_path, cgroups):
    """A service restarted in another cgroup than its predecessor's (a new login, another
    unit) still finds the predecessor's cgroups: its directory says where they are."""
    elsewhere = [
        parent / f"etude-test-{secrets.token_hex(4)}" for parent in cgroups.parents.values()
    ]
    dead = dead_owner()
    directory = tmp_path / "sessions" / dead.token
    (directory / "se-1").mkdir(parents=True)
    (directory / CGROUP_PARENTS).write_text("".join(f"{p}\n" for p in elsewhere))
    left = [other / f"etude-se-1@{dead.token}" for other in elsewhere]
    sleeper = subprocess.Popen(["sleep", "1000"])
    try:
        for cgroup in left:
            cgroup.mkdir(parents=True)
            (cgroup / "cgroup.procs").write_text(str(sleeper.pid))

        found = reclaim_owned_dirs(tmp_path / "sessions")

        assert found == Reclaimed(cgroups=1, processes=1, directories=1)
        assert sleeper.wait(5) == -signal.SIGKILL
        assert not any(cgroup.exists() for cgroup in left) and not directory.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
        for cgroup in [*left, *elsewhere]:
            with contextlib.suppress(OSError):
                cgroup.rmdir()


# The owner: a real process that starts a sandbox-like process tree the way the sandbox
# does without cgroups (a recording `limited` chain, its own process session), one child
# leaving that session, then waits to be killed.
OWNER = textwrap.dedent(
    """
    import subprocess, sys
    from pathlib import Path
    from etude.sandbox.limits import CgroupSupport, SessionCgroup, limited
    from etude.sandbox.reclaim import owned_dir
    from tests.sandbox.conftest import small_sandbox

    mine = owned_dir(Path(sys.argv[1]))
    (mine / "se-1" / "work" / "work").mkdir(parents=True)
    (mine / "se-1" / "work" / "work").chmod(0)  # as overlayfs leaves its work dir
    cgroup = SessionCgroup(CgroupSupport(0, {}, records=mine), "etude-se-1", small_sandbox())
    argv = ["bash", "-c", "setsid sleep 1000 & sleep 1000 & wait"]
    shell = subprocess.Popen(limited(argv, small_sandbox(), cgroup), start_new_session=True)
    print(mine, shell.pid, flush=True)
    sys.stdin.read()
    """
)


def processes_of(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *map(int, children)]


def test_a_killed_owners_directory_and_recorded_processes_are_reclaimed(tmp_path):
    parent = tmp_path / "sessions"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(parent)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert owner.stdout is not None
    directory, shell = owner.stdout.readline().split()
    deadline = time.monotonic() + 5
    while len(processes_of(int(shell))) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    tree = processes_of(int(shell))
    # A live process of our own with a record and a session of its own: kept.
    mine = owned_dir(parent)
    kept = subprocess.Popen(
        limited(["sleep", "1000"], small_sandbox(), SessionCgroup(
            CgroupSupport(0, {}, records=mine), "etude-se-2", small_sandbox())),
        start_new_session=True,
    )  # fmt: skip
    try:
        assert len(tree) == 3
        owner.kill()
        owner.wait()
        time.sleep(0.2)
        # What a SIGKILL leaves: the directory, its record, every process of the tree.
        assert Path(directory, "etude-se-1.pids").read_text().startswith(f"{shell} ")
        assert all(alive(p) for p in tree)

        found = reclaim_owned_dirs(parent)

        assert found == Reclaimed(processes=3, directories=1)
        assert wait_gone(tree) == []
        assert not Path(directory).exists()
        assert alive(kept.pid) and (mine / "etude-se-2.pids").is_file()
    finally:
        for pid in tree:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        kept.kill()
        kept.wait()


def test_removing_a_tree_never_follows_a_link_out_of_it(tmp_path):
    outside = tmp_path / "outside"
    (outside / "locked").mkdir(parents=True)
    (outside / "locked").chmod(0o500)
    (outside / "keep.txt").write_text("host file")
    tree = tmp_path / "tree"
    (tree / "work" / "work").mkdir(parents=True)
    (tree / "work" / "work").chmod(0)
    (tree / "link").symlink_to(outside)
    (tree / "work" / "link").symlink_to(outside / "locked")

    remove_tree(tree)

    assert not tree.exists() and not tree.is_symlink()
    assert (outside / "keep.txt").read_text() == "host file"
    assert (outside / "locked").stat().st_mode & 0o777 == 0o500
