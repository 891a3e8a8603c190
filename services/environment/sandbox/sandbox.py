"""One session's sandbox: a process tree around the persistent shell, and its workspace.

The `bwrap` backend runs the shell inside bubblewrap: new user, pid, network (loopback
only), ipc, uts and cgroup namespaces, read-only system directories, a private /tmp, the
workspace at /workspace, a cleared environment. The host reaches the workspace through
`/proc/<sandbox pid>/root/workspace`, which shows exactly what the sandbox sees (in
overlay mode, the merged view). The `process` backend runs the shell as a plain child in
the session's directory: no isolation beyond rlimits, for hosts without user namespaces.

A microVM runtime (Kata Containers, Firecracker, gVisor) is not a backend here: it wraps
the whole environment pod through a Kubernetes RuntimeClass, and bwrap keeps isolating
sessions from each other inside it (docs/environment.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NoReturn

from etude.environment.config import EnvironmentConfig
from etude.environment.sandbox.bwrap import Bwrap, bind_args, overlay_args, sandbox_argv
from etude.environment.sandbox.limits import CgroupSupport, SessionCgroup, limited
from etude.environment.sandbox.procs import children, descendants, in_group, kill_all
from etude.environment.sandbox.shell import DRIVER, RunningCommand, ShellProtocol
from etude.environment.tools.base import CommandOutcome
from etude.environment.workspace import Layout

log = logging.getLogger(__name__)

Backend = Literal["bwrap", "process"]
KILL_GRACE_SECONDS = 2.0


class SandboxStartError(RuntimeError):
    """bwrap could not create the sandbox; the message carries what it printed."""


class Sandbox:
    def __init__(
        self,
        name: str,
        layout: Layout,
        config: EnvironmentConfig,
        backend: Backend,
        bwrap: Bwrap | None,
        cgroups: CgroupSupport,
        on_kill: Callable[[str], None] = lambda reason: None,
    ) -> None:
        """`on_kill(reason)` hears of every kill: `timeout`, `processes`, `memory`."""
        self.name = name
        self.on_kill = on_kill
        self.layout = layout
        self.config = config
        self.backend = backend
        self.bwrap = bwrap
        self.cgroups = cgroups
        self.process: asyncio.subprocess.Process | None = None
        self.cgroup: SessionCgroup | None = None
        self.shell_pid = 0
        self.init_pid = 0
        self.cwd: str | None = None
        self._protocol: ShellProtocol | None = None
        self._lock = asyncio.Lock()
        self._oom_reported = False

    @property
    def root(self) -> Path:
        """The workspace as the sandbox sees it, reachable from the host."""
        if self.layout.mode == "copy":
            return self.layout.tree
        if not self.init_pid:
            raise RuntimeError("the overlay workspace exists only while the sandbox runs")
        return Path(f"/proc/{self.init_pid}/root/workspace")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        self.cgroup = SessionCgroup(self.cgroups, f"etude-{self.name}", self.config)
        shell = ["/bin/bash", "--noprofile", "--norc", "-c", DRIVER]
        if self.backend == "bwrap":
            assert self.bwrap is not None
            read_info, write_info = os.pipe()
            workspace = (
                overlay_args(self.layout.lowers, self.layout.upper, self.layout.work)
                if self.layout.mode == "overlay"
                else bind_args(self.layout.tree)
            )
            argv = sandbox_argv(
                self.bwrap, workspace_args=workspace, ro_binds=self.config.ro_binds,
                info_fd=write_info, command=shell,
            )  # fmt: skip
            try:
                self.process = await self._spawn(argv, pass_fds=(write_info,))
            finally:
                os.close(write_info)
            self.init_pid = await asyncio.to_thread(_read_child_pid, read_info)
            if not self.init_pid:
                await self._fail_start()
            self.shell_pid = await self._wait_for_shell()
        else:
            env = {"PATH": os.defpath, "HOME": str(self.layout.tree), "LANG": "C.UTF-8"}
            self.process = await self._spawn(shell, cwd=self.layout.tree, env=env)
            self.shell_pid = self.init_pid = self.process.pid
        assert self.process.stdin is not None and self.process.stdout is not None
        self._protocol = ShellProtocol(
            self.process.stdin,
            self.process.stdout,
            self.config.output_head_chars,
            self.config.output_tail_chars,
        )
        if self.cwd:  # a restarted shell goes back where the last command left it
            await self._run_unlocked(f"cd {_quote(self.cwd)} 2>/dev/null", 10)

    async def _spawn(self, argv: list[str], **kwargs) -> asyncio.subprocess.Process:
        assert self.cgroup is not None
        return await asyncio.create_subprocess_exec(
            *limited(argv, self.config, self.cgroup),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            **kwargs,
        )

    async def _wait_for_shell(self) -> int:
        for _ in range(500):
            shells = children(self.init_pid)
            if shells:
                return shells[0]
            if not self.running:
                break
            await asyncio.sleep(0.002)
        await self._fail_start()

    async def _fail_start(self) -> NoReturn:
        output = b""
        if self.process and self.process.stdout:
            with contextlib.suppress(TimeoutError):
                output = await asyncio.wait_for(self.process.stdout.read(4096), 1)
        code = await self.process.wait() if self.process else None
        await self.stop()
        raise SandboxStartError(
            f"the sandbox did not start (exit {code}): {output.decode(errors='replace')}"
        )

    async def run(self, command: str, timeout_s: float) -> CommandOutcome:
        async with self._lock:
            note = ""
            if not self.running:
                await self.stop()
                await self.start()
                note = "[the shell had exited and was restarted]\n"
            outcome = await self._run_unlocked(command, timeout_s)
            if note:
                outcome = _prefixed(outcome, note)
            return outcome

    def command_processes(self) -> list[int]:
        """Every process of the sandbox but its init and the shell: what a command left.
        Orphans are re-parented to the sandbox's init, so they are found below it; the
        `process` backend has no init of its own, so its process group stands in."""
        if self.backend == "bwrap":
            found = descendants(self.init_pid)
        else:
            found = set(descendants(self.shell_pid)) | set(in_group(self.shell_pid))
        return [p for p in found if p != self.shell_pid]

    async def kill_command_processes(self) -> None:
        await asyncio.to_thread(kill_all, self.command_processes)

    async def _run_unlocked(self, command: str, timeout_s: float) -> CommandOutcome:
        assert self._protocol is not None
        loop = asyncio.get_running_loop()
        running = await self._protocol.start(command)
        finished = await running.wait(loop.time() + timeout_s)
        if finished:
            self.cwd = running.cwd
            return await self._after_command(running)
        if running.shell_gone:
            result = running.result()
            assert self.process is not None
            return CommandOutcome(
                result.output + "\n[the shell exited; it restarts on the next command]",
                exit_code=await self.process.wait(), timed_out=False,
                truncated_chars=result.cut_chars,
            )  # fmt: skip
        # Timed out: kill what the command started, then let the shell report back.
        self.on_kill("timeout")
        await self.kill_command_processes()
        if not await running.wait(loop.time() + KILL_GRACE_SECONDS):
            # The shell itself is stuck (a builtin loop): replace the whole sandbox.
            await self.stop()
            await self.start()
        result = running.result()
        return CommandOutcome(
            result.output, exit_code=124, timed_out=True, truncated_chars=result.cut_chars
        )

    async def _after_command(self, running: RunningCommand) -> CommandOutcome:
        result = running.result()
        note = ""
        if self.cgroup and self.cgroup.dirs:
            near_limit = len(self.cgroup.pids()) >= self.config.processes - 8
            if near_limit:
                # Something (a fork bomb) holds the process limit: clear it so the
                # session stays usable.
                await self.kill_command_processes()
                assert self._protocol is not None
                await self._protocol.discard_pending()
                self.on_kill("processes")
                note = "\n[the process limit was reached; background processes were killed]"
            elif self.cgroup.oom_killed() and not self._oom_reported:
                self._oom_reported = True  # the cgroup's counter only grows: report once
                self.on_kill("memory")
                note = "\n[a process was killed for exceeding the memory limit]"
        assert result.exit_code is not None
        return CommandOutcome(
            result.output + note, exit_code=result.exit_code, timed_out=False,
            truncated_chars=result.cut_chars,
        )  # fmt: skip

    async def stop(self) -> None:
        if self.process is not None:
            if self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
        if self.cgroup is not None:
            await asyncio.to_thread(self.cgroup.remove)
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()
        self.process, self._protocol, self.cgroup = None, None, None
        self.shell_pid = self.init_pid = 0


def _read_child_pid(fd: int) -> int:
    """bwrap's `--info-fd` JSON names the host pid of the sandbox's init; 0 if it wrote none
    (it failed before creating the sandbox)."""
    with os.fdopen(fd, "rb") as info:
        data = info.read()
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError):
        return 0


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _prefixed(outcome: CommandOutcome, note: str) -> CommandOutcome:
    return CommandOutcome(
        note + outcome.output, outcome.exit_code, outcome.timed_out, outcome.truncated_chars
    )
