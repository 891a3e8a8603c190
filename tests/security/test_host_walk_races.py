"""Attacks on the host-side walks (grep, Diff, list_dir, file_search) from inside a sandbox.

A background loop in the sandbox swaps a directory for a symlink to `/` and to a host
directory holding a secret marker, while the host walks the workspace: no result may carry
the marker or a host file. FIFOs, sockets and devices in the workspace must not hang a walk,
nor starve other sessions. Each test checks the session still works afterwards.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from etude.common.toolcalls import ToolCall

SECRET = "HOST-SECRET-MARKER-7f3a"
ROUNDS = 100


def call(name: str, **arguments: str) -> ToolCall:
    return ToolCall(name, arguments, id="c0")


def swapper(host_dir: Path) -> str:
    """A shell loop flipping `d` between a real directory and links to / and to `host_dir`
    (its absolute host path: if the host followed it, the host's files would show)."""
    return (
        "(while :; do rm -rf d; mkdir d; echo needle inside > d/f.txt; "
        f"rm -rf d; ln -s / d; rm -f d; ln -s {host_dir} d; rm -f d; "
        f"ln -s {host_dir}/secret.txt d; rm -f d; done) >/dev/null 2>&1 &"
    )


def plant_secret(tmp_path: Path) -> Path:
    host_dir = tmp_path / "host-secrets"
    host_dir.mkdir()
    (host_dir / "secret.txt").write_text(f"needle {SECRET}\n")
    return host_dir


async def still_works(manager, session_id: str) -> None:
    [kill] = await manager.execute(
        session_id, [call("run_terminal_command", command="kill %1; echo ok")]
    )
    assert kill.result.exit_code == 0 and "ok" in kill.result.output
    [read] = await manager.execute(session_id, [call("read_file", path="pkg/calc.py")])
    assert "return a + b" in read.result.output


async def test_grep_during_symlink_swaps_never_shows_the_host(manager, repo, tmp_path):
    host_dir = plant_secret(tmp_path)
    session = await manager.create("t", repo)
    [started] = await manager.execute(
        session.id, [call("run_terminal_command", command=swapper(host_dir))]
    )
    assert started.result.exit_code == 0
    deadline = time.monotonic() + 60
    seen_inside = 0
    for _ in range(ROUNDS):
        for path in (".", "d"):
            [executed] = await manager.execute(
                session.id, [call("grep", pattern="needle|root:", path=path)]
            )
            output = executed.result.output
            assert SECRET not in output and "root:x:0" not in output, output
            seen_inside += "needle inside" in output
        assert time.monotonic() < deadline
    assert seen_inside  # the loop ran: the real directory was searched now and then
    await still_works(manager, session.id)


async def test_diff_during_symlink_swaps_never_shows_the_host(manager, repo, tmp_path):
    host_dir = plant_secret(tmp_path)
    session = await manager.create("t", repo)
    await manager.execute(session.id, [call("run_terminal_command", command=swapper(host_dir))])
    deadline = time.monotonic() + 60
    for _ in range(ROUNDS // 2):
        diff = await manager.diff(session.id)
        assert SECRET not in diff.unified_diff and "root:x:0" not in diff.unified_diff
        assert all(p == "d" or p.startswith("d/") for p in diff.changed_paths), diff.changed_paths
        assert time.monotonic() < deadline
    await still_works(manager, session.id)


SPECIAL_FILES = (
    "mkfifo fifo && mkfifo pkg/calc.py.fifo && "
    "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' ; "
    "mknod dev c 1 3 2>/dev/null; ln -s fifo fifo_link; echo made"
)


async def test_fifos_sockets_and_devices_never_hang_a_walk(manager, repo):
    session = await manager.create("t", repo)
    [made] = await manager.execute(
        session.id, [call("run_terminal_command", command=SPECIAL_FILES)]
    )
    assert "made" in made.result.output
    started = time.monotonic()
    diff = await asyncio.wait_for(manager.diff(session.id), 20)
    assert {"fifo", "pkg/calc.py.fifo"} <= set(diff.skipped)
    assert "fifo" not in diff.changed_paths and "fifo_link" in diff.changed_paths
    results = await asyncio.wait_for(
        manager.execute(
            session.id,
            [
                call("grep", pattern="anything"),
                call("list_dir", path="."),
                call("file_search", glob="*fifo*"),
                call("read_file", path="fifo"),
                call("read_file", path="fifo_link"),
            ],
        ),
        20,
    )
    assert "fifo" in results[1].result.output and "fifo" in results[2].result.output
    refused = [r.result.exit_code != 0 for r in results[3:5]]  # refused, not blocked
    assert refused == [True, True]
    assert time.monotonic() - started < 20
    await manager.execute(session.id, [call("run_terminal_command", command="true")])
    [read] = await manager.execute(session.id, [call("read_file", path="pkg/calc.py")])
    assert "return a + b" in read.result.output


async def test_abused_diffs_do_not_starve_other_sessions(manager, repo):
    abusers = [await manager.create("t", repo) for _ in range(3)]
    for session in abusers:
        await manager.execute(
            session.id,
            [
                call(
                    "run_terminal_command",
                    command=f"{SPECIAL_FILES}; for i in $(seq 300); do mkfifo f$i; done",
                )
            ],
        )
    # Many Diffs of the abused sessions at once, while others create sessions and read.
    diffs = [asyncio.ensure_future(manager.diff(s.id)) for s in abusers for _ in range(6)]
    started = time.monotonic()
    for _ in range(3):
        other = await asyncio.wait_for(manager.create("t", repo), 20)
        [read] = await asyncio.wait_for(
            manager.execute(other.id, [call("read_file", path="pkg/calc.py")]), 20
        )
        assert "return a + b" in read.result.output
    assert time.monotonic() - started < 30
    for result in await asyncio.wait_for(asyncio.gather(*diffs), 60):
        assert len([p for p in result.skipped if p.startswith("f")]) >= 300
