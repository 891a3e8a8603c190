"""Attacks on what a sandbox can reach: the network, the host's files, other sessions.

Each test opens sessions through the environment's gRPC API, tries to reach something a
policy must never reach, asserts it cannot, and asserts the session still works after.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from etude.common.toolcalls import ToolCall
from etude.environment.client import GrpcEnvironment
from etude.sandbox.bwrap import ETUDE_PACKAGE, interpreter_dirs
from tests.environment.conftest import make_manager, serving

pytestmark = pytest.mark.integration

SECRET = "etude-host-secret-7f3a9c"


def shell(command: str, index: int = 0) -> ToolCall:
    return ToolCall("run_terminal_command", {"command": command}, f"call_{index}")


@pytest.fixture
async def environment(tmp_path, repo):
    manager = make_manager(tmp_path)
    try:
        async with serving(manager) as (client, _runtime):
            yield client
    finally:
        await manager.close_all()


async def run(env: GrpcEnvironment, session: str, command: str) -> str:
    [executed] = await env.execute(session, [shell(command)])
    return executed.result.output


async def still_works(env: GrpcEnvironment, session: str) -> None:
    output = await run(env, session, "echo alive > alive.txt && cat alive.txt")
    assert output.startswith("alive\n")


@pytest.fixture
def host_listener():
    """A TCP server on the host's loopback that records whether anyone connected."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    connected = threading.Event()
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connected.set()
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connected
    stop.set()
    server.close()
    thread.join(timeout=2)


async def test_the_sandbox_cannot_reach_host_ports(environment, repo, host_listener):
    port, connected = host_listener
    session = (await environment.create_session("t", str(repo))).session_id
    probe = (
        "import socket,sys\n"
        "for host in ('127.0.0.1', 'localhost', '::1'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=1).close()\n"
        "        print('CONNECTED', host)\n"
        "    except OSError as error:\n"
        "        print('refused', host, type(error).__name__)\n"
    )
    output = await run(environment, session, f"python3 -c {quote(probe)}")
    assert "CONNECTED" not in output
    assert not connected.is_set()
    # No interface but loopback exists inside: nothing routes out.
    interfaces = await run(environment, session, "ls /sys/class/net 2>/dev/null; cat /proc/net/dev")
    assert "eth" not in interfaces and "ens" not in interfaces
    await still_works(environment, session)


async def test_host_files_outside_the_workspace_are_invisible(environment, repo, tmp_path):
    secret_dir = tmp_path / "host-secrets"
    secret_dir.mkdir()
    (secret_dir / "token").write_text(SECRET)
    session = (await environment.create_session("t", str(repo))).session_id
    probes = [
        f"cat {secret_dir}/token",
        f"ls {tmp_path}",
        "cat /etc/shadow",
        "ls -a /root",
        # The service's interpreter is bound in on purpose (a venv under /tmp is walked in
        # minutes on a cold disk, past the call's deadline): every other file is searched.
        f"find /etc /tmp /home /root /var /opt /srv /mnt {interpreter_pruned()} -type f "
        f"-print0 2>/dev/null | xargs -0 grep -ls {SECRET} 2>/dev/null | head",
    ]
    for probe in probes:
        assert SECRET not in await run(environment, session, probe), probe
    # System directories are read-only: nothing the sandbox writes reaches the host's /usr.
    await run(environment, session, "touch /usr/etude-escape 2>/dev/null; echo x > /etc/etude-x")
    assert not os.path.exists("/usr/etude-escape") and not os.path.exists("/etc/etude-x")
    await still_works(environment, session)


async def test_one_session_cannot_see_another(environment, repo):
    first = (await environment.create_session("t", str(repo))).session_id
    second = (await environment.create_session("t", str(repo))).session_id
    await run(environment, first, f"echo {SECRET} > private.txt; sleep 30 &")
    probes = [
        "cat private.txt",
        f"grep -rs {SECRET} /tmp /workspace /etc /home /root /var /opt /mnt 2>/dev/null | head -3",
        "ps -eo pid,args 2>/dev/null || ls /proc",
        "cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '",
    ]
    for probe in probes:
        output = await run(environment, second, probe)
        assert SECRET not in output, probe
        assert "sleep 30" not in output, probe
    await still_works(environment, second)
    await still_works(environment, first)


def interpreter_pruned() -> str:
    """`find` options that skip the interpreter directories every sandbox sees."""
    return " ".join(f"-path {quote(d)} -prune -o" for d in interpreter_dirs())


def quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


async def test_the_bundled_tasks_answers_are_hidden_even_where_their_directory_is_bound(
    tmp_path, repo
):
    """Where etude is installed (a container's site-packages, which every sandbox binds so
    that `python -m pytest` works) its package holds the bundled tasks' gold patches and
    hidden tests: the sandbox must not show them, whatever else of that directory it shows."""
    package = ETUDE_PACKAGE
    tasks_file = package / "tasks" / "etude_mini" / "tasks.jsonl"
    around = package.parent  # binding this binds the package too
    beside = next(p for p in around.iterdir() if p.is_file())
    manager = make_manager(tmp_path, ro_binds=(str(around),))
    try:
        async with serving(manager) as (client, _runtime):
            session = (await client.create_session("t", str(repo))).session_id
            leaked = await run(client, session, f"head -c 300 {tasks_file}")
            assert "instance_id" not in leaked and "No such file" in leaked
            assert (await run(client, session, f"ls -A {package} | wc -l")).startswith("0\n")
            readable = await run(client, session, f"test -r {beside} && echo readable")
            assert readable.startswith("readable\n")
            await still_works(client, session)
    finally:
        await manager.close_all()


async def test_a_set_user_id_file_a_session_writes_is_out_of_other_users_reach(tmp_path, repo):
    """Files a sandbox writes land in the session's layer owned by the service's account
    (root here), set-user-id bit and all: another local user must not reach them, even
    where every directory above the environment's own is open to all."""
    open_to_all = Path(tempfile.mkdtemp(prefix="etude-open-"))
    open_to_all.chmod(0o755)
    manager = make_manager(
        tmp_path, root_dir=open_to_all / "environment", repository_roots=(tmp_path,)
    )  # fmt: skip
    try:
        async with serving(manager) as (client, _runtime):
            session = (await client.create_session("t", str(repo))).session_id
            await run(client, session, "cp /bin/true escalate && chmod 4755 escalate")
            [planted] = [
                p for p in open_to_all.rglob("escalate") if p.stat().st_mode & 0o4000
            ]  # fmt: skip
            assert planted.stat().st_uid == os.getuid()
            with pytest.raises(PermissionError):
                subprocess.run([str(planted)], user=65534, group=65534, extra_groups=[])
            await still_works(client, session)
    finally:
        await manager.close_all()
        shutil.rmtree(open_to_all, ignore_errors=True)
