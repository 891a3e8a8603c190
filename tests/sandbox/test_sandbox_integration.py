"""Hostile commands against a real bubblewrap sandbox: each is contained, and the sandbox
keeps working afterwards."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


async def run(sandbox, command: str, timeout_s: float = 30):
    return await sandbox.run(command, timeout_s)


async def still_usable(sandbox) -> None:
    outcome = await run(sandbox, "echo alive; pwd")
    assert outcome.exit_code == 0
    assert outcome.output == "alive\n/workspace\n"


async def test_cwd_and_environment_persist_between_commands(sandbox):
    await run(sandbox, "cd pkg && export GREETING=hello && greet() { echo hi; }")
    outcome = await run(sandbox, "pwd; echo $GREETING; greet")
    assert outcome.output == "/workspace/pkg\nhello\nhi\n"


async def test_the_environment_is_cleared_and_the_workspace_is_mounted(open_sandbox):
    os.environ["ETUDE_TEST_SECRET"] = "leak"
    try:
        sandbox = await open_sandbox()  # started while the service's environment has it
        outcome = await run(sandbox, "env; ls /workspace")
    finally:
        del os.environ["ETUDE_TEST_SECRET"]
    assert "leak" not in outcome.output
    assert "README.md\nnotes.txt\npkg\n" in outcome.output


async def test_only_loopback_exists_inside(sandbox):
    outcome = await run(sandbox, "cat /proc/net/dev")
    interfaces = [line.split(":")[0].strip() for line in outcome.output.splitlines()[2:]]
    assert interfaces == ["lo"]
    # A documentation address (RFC 5737): with no route, the kernel refuses at once.
    probe = (
        'python3 -c "import socket; s=socket.socket(); s.settimeout(3); '
        "s.connect(('192.0.2.1', 80))\""
    )
    outcome = await run(sandbox, probe)
    assert outcome.exit_code != 0
    assert "Network is unreachable" in outcome.output
    await still_usable(sandbox)


async def test_a_server_on_the_hosts_loopback_is_out_of_reach(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        probe = (
            f'python3 -c "import socket; s=socket.socket(); s.settimeout(3); '
            f"s.connect(('127.0.0.1', {port}))\""
        )
        outcome = await run(sandbox, probe)
        assert outcome.exit_code != 0
        assert "Connection refused" in outcome.output
    finally:
        server.close()
    await still_usable(sandbox)


async def test_a_fork_bomb_is_contained(sandbox):
    outcome = await run(sandbox, ":(){ :|:& };:; sleep 2", timeout_s=5)
    assert outcome.exit_code != 0 or "process limit" in outcome.output
    await still_usable(sandbox)
    await asyncio.sleep(0.2)
    assert sandbox.command_processes() == []


async def test_writing_past_the_file_size_limit_fails(sandbox, sandbox_config):
    outcome = await run(sandbox, "head -c 64M /dev/zero > big.bin")
    assert outcome.exit_code != 0
    size = (sandbox.root / "big.bin").stat().st_size
    assert size <= sandbox_config.file_size_bytes
    await still_usable(sandbox)


async def test_a_4_gb_allocation_fails(sandbox):
    outcome = await run(sandbox, "python3 -c 'bytearray(4 * 1024**3)'")
    assert outcome.exit_code != 0
    assert "MemoryError" in outcome.output
    await still_usable(sandbox)


async def test_a_command_past_its_timeout_is_killed_with_no_leftover(sandbox):
    outcome = await run(sandbox, "sleep 1000 & sleep 1000", timeout_s=1)
    assert outcome.timed_out and outcome.exit_code == 124
    await asyncio.sleep(0.2)
    leftovers = [p for p in sandbox.command_processes() if _cmdline(p) == "sleep1000"]
    assert leftovers == []
    await still_usable(sandbox)


async def test_a_shell_stuck_in_a_builtin_loop_is_replaced(sandbox):
    await run(sandbox, "cd pkg")
    outcome = await run(sandbox, "while true; do :; done", timeout_s=1)
    assert outcome.timed_out
    after = await run(sandbox, "pwd")
    assert after.output == "/workspace/pkg\n"  # the new shell went back to the old cwd


async def test_a_hundred_megabytes_of_output_are_capped(sandbox):
    outcome = await run(sandbox, "yes | head -c 100000000", timeout_s=60)
    assert outcome.exit_code == 0
    assert outcome.truncated_chars == 100_000_000 - 10_000
    assert len(outcome.output) < 10_100
    assert outcome.output.startswith("y\ny\n") and outcome.output.endswith("y\n")
    await still_usable(sandbox)


async def test_writing_into_the_base_changes_only_that_sandbox(open_sandbox, repo):
    first = await open_sandbox()
    second = await open_sandbox()
    await run(first, "echo changed > notes.txt; rm README.md")
    assert (repo / "notes.txt").read_text() == "one\ntwo\nthree\n"
    assert (repo / "README.md").exists()
    outcome = await run(second, "cat notes.txt; ls")
    assert outcome.output.startswith("one\ntwo\nthree\n")
    assert "README.md" in outcome.output


async def test_another_sandboxs_workspace_is_not_visible(open_sandbox):
    first = await open_sandbox()
    second = await open_sandbox()
    await run(first, "echo secret > mine.txt")
    host_path = first.layout.session_dir
    outcome = await run(second, f"ls {host_path} 2>&1; ls /workspace")
    assert "No such file or directory" in outcome.output
    assert "mine.txt" not in outcome.output


async def test_the_workspace_handle_outlives_the_sandboxs_namespace(sandbox):
    root = sandbox.root
    os.kill(sandbox.init_pid, 9)  # the pid and mount namespaces die with their init
    await asyncio.sleep(0.3)
    assert (root / "notes.txt").read_text().startswith("one")
    (root / "written-meanwhile.txt").write_text("kept\n")
    await sandbox.ensure_running()
    assert sandbox.root == root  # the same path names the new sandbox's workspace
    outcome = await run(sandbox, "cat written-meanwhile.txt")
    assert outcome.output.endswith("kept\n")
    await still_usable(sandbox)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", "")
    except OSError:
        return ""
