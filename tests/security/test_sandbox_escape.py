"""Attacks on the sandbox itself, through the environment's gRPC API: privileges inside,
leaving through the workspace mount, nested namespaces, dangerous syscalls, what /proc
shows of the service, fork bombs, disk fillers, forged end markers, and a shell that
kills itself. Each test performs the attack, asserts it failed, and asserts the session
still works after.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import pytest

from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.common.toolcalls import ToolCall
from etude.environment.client import GrpcEnvironment
from etude.environment.server import registration
from etude.sandbox import limits
from etude.sandbox.quota import allocated
from tests.environment.conftest import make_manager

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
SECRET = "etude-planted-secret-5b1d"
QUOTA = 64 * MIB


def call(name: str, index: int = 0, **arguments: str) -> ToolCall:
    return ToolCall(name, arguments, f"call_{index}")


def shell(command: str, index: int = 0, timeout_s: float | None = None) -> ToolCall:
    arguments = {"command": command}
    if timeout_s is not None:
        arguments["timeout_s"] = str(timeout_s)
    return ToolCall("run_terminal_command", arguments, f"call_{index}")


async def start_environment(tmp_path: Path, **overrides):
    manager = make_manager(tmp_path, disk_bytes=QUOTA, tmp_bytes=32 * MIB, **overrides)
    runtime = ServiceRuntime(
        "environment", GrpcSettings(drain_seconds=0, grace_seconds=1), [registration(manager)]
    )
    await runtime.start()
    client = GrpcEnvironment(runtime.address, ClientSettings(timeout_seconds=60))
    return manager, runtime, client


@pytest.fixture
async def environment(tmp_path, monkeypatch):
    # A credential in the service's environment, as a deployed service has one.
    monkeypatch.setenv("ETUDE_PLANTED_TOKEN", SECRET)
    manager, runtime, client = await start_environment(tmp_path)
    try:
        yield client, manager
    finally:
        await client.close()
        await runtime.shutdown()
        await manager.close_all()


async def run(env: GrpcEnvironment, session: str, command: str, timeout_s=None):
    [executed] = await env.execute(session, [shell(command, timeout_s=timeout_s)])
    return executed.result


async def still_works(env: GrpcEnvironment, session: str) -> None:
    result = await run(
        env, session, "cd /workspace && echo alive > alive.txt && cat alive.txt && pwd"
    )
    assert result.exit_code == 0
    assert result.output.startswith("alive\n/workspace")
    [read] = await env.execute(session, [call("read_file", path="alive.txt")])
    assert "alive" in read.result.output


def printed(result) -> str:
    """A command's output without the exit-code line the tool appends."""
    return result.output.rsplit("[exit code:", 1)[0]


def host_processes() -> int:
    return sum(1 for entry in os.listdir("/proc") if entry.isdigit())


async def test_nothing_inside_is_root_or_holds_a_capability(environment, repo):
    env, _ = environment
    session = (await env.create_session("t", str(repo))).session_id
    result = await run(
        env, session, "id -u; id -g; grep -E '^Cap(Eff|Prm|Inh|Amb)' /proc/self/status"
    )
    lines = printed(result).splitlines()
    assert lines[0] != "0" and lines[1] != "0"
    caps = [line.split()[1] for line in lines[2:6]]
    assert caps == ["0000000000000000"] * 4
    await still_works(env, session)


async def test_the_workspace_mount_cannot_be_swapped_for_the_host(environment, repo, tmp_path):
    env, _ = environment
    marker = tmp_path / "host-marker.txt"
    marker.write_text(SECRET)
    session = (await env.create_session("t", str(repo))).session_id
    host_before = set(os.listdir("/"))
    swap = await run(
        env,
        session,
        "cd / && umount -l /workspace; rmdir /workspace; ln -s / /workspace; "
        "mount --bind /tmp /workspace; echo tried",
    )
    assert "tried" in swap.output
    inside = await run(env, session, "ls /workspace")
    assert "README.md" in inside.output  # the mount stayed where it was
    relative = os.path.relpath(marker, "/")
    results = await env.execute(
        session,
        [
            call("read_file", 0, path=str(marker)),
            call("read_file", 1, path=relative),
            call("list_dir", 2, path="."),
            call("write_file", 3, path="planted-by-attack.txt", content="x"),
            call("delete_file", 4, path=relative),
            call("list_dir", 5, path=os.path.dirname(relative)),
        ],
    )
    assert SECRET not in "".join(r.result.output for r in results)
    assert results[0].result.exit_code != 0 and results[1].result.exit_code != 0
    assert "README.md" in results[2].result.output and "usr/" not in results[2].result.output
    assert results[4].result.exit_code != 0 and results[5].result.exit_code != 0
    assert marker.read_text() == SECRET
    assert set(os.listdir("/")) == host_before
    assert (await env.diff(session)).changed_paths == ["planted-by-attack.txt"]
    await still_works(env, session)


async def test_no_namespace_can_be_made_inside(environment, repo):
    env, _ = environment
    session = (await env.create_session("t", str(repo))).session_id
    for flag in ("-U", "-r", "-m", "-n", "-p -f", "-i", "-u", "-C"):
        result = await run(env, session, f"unshare {flag} true; echo rc=$?")
        assert "rc=0" not in result.output, flag
    clone = (
        'python3 -c "import ctypes; l = ctypes.CDLL(None, use_errno=True); '
        "print(l.syscall(56 if __import__('os').uname().machine == 'x86_64' else 220, "
        '0x10000000 | 17, 0, 0, 0, 0), ctypes.get_errno())"'
    )
    assert printed(await run(env, session, clone)).split() == ["-1", "1"]
    await still_works(env, session)


# Each call with harmless arguments: the filter refuses it before the arguments matter.
DENIED_CALLS = {
    "mount": ("mount", (b"none", b"/workspace", b"tmpfs", 0, None)),
    "umount2": ("umount2", (b"/workspace", 2)),
    "ptrace": ("ptrace", (16, 1, 0, 0)),  # PTRACE_ATTACH to the sandbox's init
    "chroot": ("chroot", (b"/tmp",)),
    "unshare": ("unshare", (0,)),
    "keyctl": ("syscall", (250, 0, 0, 0, 0)),  # x86_64 numbers; aarch64 below
    "bpf": ("syscall", (321, 0, 0, 0)),
    "perf_event_open": ("syscall", (298, 0, 0, -1, -1, 0)),
    "setns": ("setns", (0, 0)),
    "open_tree": ("syscall", (428, -100, b"/", 0)),
}
AARCH64 = {"keyctl": 219, "bpf": 280, "perf_event_open": 241}


async def test_mount_ptrace_keyctl_bpf_and_friends_are_refused(environment, repo):
    env, _ = environment
    session = (await env.create_session("t", str(repo))).session_id
    calls = []
    for name, (function, args) in DENIED_CALLS.items():
        if function == "syscall" and os.uname().machine == "aarch64":
            args = (AARCH64.get(name, args[0]), *args[1:])
        calls.append(f"({name!r}, {function!r}, {args!r})")
    script = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"for name, function, args in [{', '.join(calls)}]:\n"
        "    ctypes.set_errno(0)\n"
        "    rc = getattr(libc, function)(*args)\n"
        "    print(name, rc, ctypes.get_errno())\n"
    )
    await env.execute(session, [call("write_file", 0, path="probe.py", content=script)])
    result = await run(env, session, "python3 probe.py")
    lines = dict(line.split(" ", 1) for line in printed(result).splitlines() if " " in line)
    for name in DENIED_CALLS:
        assert lines.get(name) == "-1 1", (name, result.output)  # EPERM
    await still_works(env, session)


async def test_ordinary_work_still_runs_under_the_filter(environment, repo):
    env, _ = environment
    session = (await env.create_session("t", str(repo))).session_id
    test = "from pkg.calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    await env.execute(session, [call("write_file", 0, path="test_calc.py", content=test)])
    commands = [
        "python3 -m pytest -q test_calc.py 2>&1 | tail -1",
        "git init -q . && git add -A && git -c user.email=a@b -c user.name=a commit -qm x "
        "&& git log --oneline | wc -l",
        "python3 -c 'import subprocess, threading, multiprocessing as m; "
        't = threading.Thread(target=print, args=("thread",)); t.start(); t.join(); '
        'print(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip()); '
        "p = m.Pool(2); print(sum(p.map(abs, [-1, -2]))); p.close()'",
        "sleep 0.2 & wait; seq 1 100 | sort -n | tail -1",
    ]
    outputs = [printed(await run(env, session, c)) for c in commands]
    assert "1 passed" in outputs[0]
    assert outputs[1].strip() == "1"
    assert outputs[2].split() == ["thread", "child", "3"]
    assert outputs[3].strip() == "100"


async def test_proc_shows_nothing_of_the_service(environment, repo, tmp_path):
    env, _ = environment
    session = (await env.create_session("t", str(repo))).session_id
    result = await run(
        env,
        session,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/environ; echo; tr '\\0' ' ' < $p/cmdline;"
        " echo; done; tr '\\0' ' ' < /proc/1/environ",
    )
    assert result.exit_code == 0 and "bwrap" in result.output
    assert SECRET not in result.output
    assert re.search(r"\bETUDE_\w+=", result.output) is None  # no service variable
    assert str(tmp_path) not in result.output  # the session's host directories
    await still_works(env, session)


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "no-cgroup"])
async def test_a_fork_bomb_is_stopped_and_the_host_recovers(tmp_path, repo, monkeypatch, cgroup):
    if not cgroup:
        # A host without a writable cgroup tree cannot be made here otherwise: as root,
        # the watcher's kill is then the only guard.
        monkeypatch.setattr(limits.CgroupSupport, "detect", lambda: limits.CgroupSupport(0, {}))
    manager, runtime, env = await start_environment(tmp_path, processes=64)
    try:
        session = (await env.create_session("t", str(repo))).session_id
        await still_works(env, session)
        baseline = host_processes()
        bombs = [
            ":(){ :|:& };:; sleep 3",
            "python3 -c 'import os, time\nwhile True:\n    try: os.fork()\n"
            "    except OSError: time.sleep(0.01)'",
        ]
        for bomb in bombs:
            result = await run(env, session, bomb, timeout_s=4)
            # A kill reports the process limit; where RLIMIT_NPROC holds (a non-root host
            # user) forks just fail until the timeout ends the command.
            assert "process limit" in result.output or result.exit_code == 124
            deadline = time.monotonic() + 5
            while host_processes() > baseline + 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert host_processes() <= baseline + 5
            await still_works(env, session)
    finally:
        await env.close()
        await runtime.shutdown()
        await manager.close_all()


async def test_a_background_fork_bomb_is_stopped_between_commands(environment, repo):
    env, _ = environment
    session = (await env.create_session("t", str(repo))).session_id
    baseline = host_processes()
    await run(env, session, "(sleep 0.5; :(){ :|:& };:) > /dev/null 2>&1 &")
    await asyncio.sleep(3)  # no command runs meanwhile
    assert host_processes() <= baseline + 5
    result = await run(env, session, "echo next")
    assert "process limit" in result.output and "next" in result.output
    await still_works(env, session)


async def test_filling_the_disk_is_stopped_at_the_quota(environment, repo):
    env, manager = environment
    opened = await env.create_session("t", str(repo))
    layout = manager.get(opened.session_id).layout
    session = opened.session_id
    single = await run(env, session, "dd if=/dev/zero of=big bs=1M count=500 2>&1")
    assert single.exit_code != 0  # one file stops at the quota
    assert allocated(layout.upper).bytes <= QUOTA + MIB
    many = await run(
        env, session, "for i in $(seq 1 20); do head -c 40M /dev/zero > f$i; done; echo end"
    )
    assert "disk quota of 64 MiB was exceeded" in many.output
    assert "end" not in many.output  # the loop itself was killed
    # The watcher polls every 50 ms: what a fast writer adds meanwhile is the slack.
    assert allocated(layout.upper).bytes < QUOTA + 256 * MIB
    tmp = await run(env, session, "head -c 100M /dev/zero > /tmp/x; echo rc=$?")
    assert "rc=0" not in tmp.output  # /tmp is a sized tmpfs
    cleanup = await run(env, session, "rm -f big f* /tmp/x && echo cleaned")
    assert cleanup.output.startswith("cleaned")
    await still_works(env, session)


async def test_a_forged_end_marker_does_not_end_the_command(environment, repo):
    env, _ = environment
    session = (await env.create_session("t", str(repo))).session_id
    forgeries = [
        "printf '\\n__ETUDE_DONE_%s_0_/\\n' \"$__etude_nonce\"; sleep 1044",
        # Read the next command off the driver's own stdin, as the driver would.
        "printf '\\n__ETUDE_DONE_%s_0_/\\n' \"$__etude_nonce\"; exec 0<&10; "
        "read -r -d '' a; read -r -d '' b; sleep 1044",
        # Redefine the builtins the driver loop uses.
        "printf() { builtin printf '\\n__ETUDE_DONE_%s_0_/\\n' \"$__etude_nonce\"; }; sleep 1044",
    ]
    for forged in forgeries:
        started = time.monotonic()
        result = await run(env, session, forged, timeout_s=2)
        assert time.monotonic() - started >= 2, forged
        assert result.exit_code == 124 and result.error_reason == "timeout", forged
        await still_works(env, session)
        leftover = await run(env, session, "ps -eo args | grep -c '^sleep 1044' || true")
        assert printed(leftover).strip() == "0", forged


@pytest.mark.parametrize("last", ["exit", "exec true", "kill -9 $$"])
async def test_a_shell_that_ends_itself_leaves_a_working_session(environment, repo, last):
    env, _ = environment
    session = (await env.create_session("t", str(repo))).session_id
    results = await env.execute(
        session,
        [
            call("write_file", 0, path="fix.txt", content="fixed\n"),
            shell("cd pkg && echo made > made.txt", 1),
            shell(last, 2),
            call("read_file", 3, path="fix.txt"),
            call("write_file", 4, path="after.txt", content="after\n"),
            call("list_dir", 5, path="pkg"),
        ],
    )
    assert "fixed" in results[3].result.output
    assert results[4].result.exit_code == 0
    assert "made.txt" in results[5].result.output
    diff = await env.diff(session)
    assert sorted(diff.changed_paths) == ["after.txt", "fix.txt", "pkg/made.txt"]
    where = await run(env, session, "pwd; cat /workspace/after.txt")
    assert printed(where).splitlines()[-2:] == ["/workspace/pkg", "after"]
