"""One session's sandbox: a process tree around the persistent shell, and its workspace.

The `bwrap` backend runs the shell inside bubblewrap (see `bwrap.sandbox_argv`): new
user, pid, network (loopback only), ipc, uts and cgroup namespaces, a non-root uid with no
capabilities, a seccomp filter, a read-only system, a private /tmp, the workspace at
/workspace, a cleared environment. The `process` backend runs the shell as a plain child
in the session's directory: no isolation beyond rlimits, for hosts without user
namespaces.

The workspace handle. In overlay mode the merged workspace exists only in the sandbox's
mount namespace. The host opens it once, right after the sandbox starts and before any
command runs, as an `O_PATH` fd to `/proc/<init>/root/workspace`: the fd names the
overlay mount itself, not a path, so nothing the sandbox does later (unmounting
/workspace, putting a symlink to / in its place, exiting) redirects it, and it keeps the
mount alive after the sandbox's namespace dies. `root` is `/proc/<this pid>/fd/<fd>`,
usable by this process and its children. The fd number stays the same for the sandbox's
whole life (a restart puts the new mount under the same number), so a `root` computed
earlier never names some other file that happens to reuse the number.

Watching. While the sandbox lives, a task polls its process count and its disk usage; on
a breach (a fork bomb, a disk filler, also in the background between commands) it kills
every process but the shell and tells the next command's output and `on_kill`.

What the sandbox can still see of the host: /proc/self/mountinfo lists the host paths of
what is mounted (the bound system and interpreter directories, the session's overlay
layers); they name directories the sandbox cannot reach. docs/security.md has the rest.

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
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from etude.sandbox.bwrap import (
    WORKSPACE,
    Bwrap,
    bind_args,
    overlay_args,
    python_environment_variables,
    sandbox_argv,
)
from etude.sandbox.config import SandboxConfig
from etude.sandbox.limits import CgroupSupport, SessionCgroup, limited
from etude.sandbox.procs import (
    children,
    descendants,
    in_group,
    kill_all,
    subtree,
    tasks_of_user,
)
from etude.sandbox.quota import DiskQuota
from etude.sandbox.shell import DRIVER, RunningCommand, ShellProtocol, ShellWatch
from etude.sandbox.types import CommandOutcome, Layout

log = logging.getLogger(__name__)

KILL_GRACE_SECONDS = 2.0
PROCESS_POLL_SECONDS = (0.02, 0.05)  # while a command runs, between commands
DISK_POLL_SECONDS = (0.05, 2.0)  # while a command runs, between commands
PROCESS_MARGIN = 8  # the cgroup never lets the count reach the limit itself
MIB = 1024 * 1024
RESTARTED = "[the shell had exited and was restarted]\n"


class SandboxStartError(RuntimeError):
    """bwrap could not create the sandbox; the message carries what it printed."""


class Sandbox:
    def __init__(
        self,
        name: str,
        layout: Layout,
        config: SandboxConfig,
        bwrap: Bwrap | None,
        cgroups: CgroupSupport,
        on_kill: Callable[[str], None] = lambda reason: None,
        python_environment: Path | None = None,
    ) -> None:
        """`bwrap` is the configured backend's (None for `process`); `on_kill(reason)` hears
        of every kill: `timeout`, `processes`, `memory`, `disk`; `python_environment`: a
        virtual environment the commands run with (read-only, its bin/ first on PATH)."""
        self.name = name
        self.python_environment = python_environment
        self.on_kill = on_kill
        self.layout = layout
        self.config = config
        self.backend = config.backend
        self.bwrap = bwrap
        self.cgroups = cgroups
        self.process: asyncio.subprocess.Process | None = None
        self.cgroup: SessionCgroup | None = None
        self.shell_pid = 0
        self.init_pid = 0
        self.cwd: str | None = None
        self.disk: DiskQuota | None = None
        self._protocol: ShellProtocol | None = None
        self._lock = asyncio.Lock()
        self._oom_reported = False
        self._user_tasks_at: tuple[int, float] = (0, float("-inf"))
        self._root_fd: int | None = None
        self._watcher: asyncio.Task | None = None
        self._command_running = False
        self._notes: dict[str, str] = {}  # reason → what the next output says of a kill
        self._restart_note = ""

    @property
    def _uses_root_fd(self) -> bool:
        return self.backend == "bwrap" and self.layout.mode == "overlay"

    @property
    def root(self) -> Path:
        """The workspace as the sandbox sees it, reachable from the host."""
        if not self._uses_root_fd:
            return self.layout.tree
        if self._root_fd is None:
            raise RuntimeError("the overlay workspace exists only while the sandbox runs")
        return Path(f"/proc/{os.getpid()}/fd/{self._root_fd}")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def disk_left(self) -> int:
        """Bytes the workspace may still grow by before the disk quota (blocking: it may
        walk the layer; call it from a worker thread). File tools check it before a write."""
        if self.disk is None:
            return self.config.disk_bytes
        return self.disk.left()

    async def start(self) -> None:
        if self.disk is None:
            layer = self.layout.upper if self.layout.mode == "overlay" else self.layout.tree
            baseline = self.layout.base if self.layout.mode == "copy" else None
            self.disk = await asyncio.to_thread(DiskQuota, layer, self.config.disk_bytes, baseline)
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
                info_fd=write_info, command=shell, uid=self.config.uid,
                gid=self.config.uid, tmp_bytes=self.config.tmp_bytes,
                python_environment=self.python_environment,
            )  # fmt: skip
            try:
                # Nothing of the service's environment reaches even bwrap's own process.
                env = {"PATH": "/usr/bin:/bin"}
                self.process = await self._spawn(argv, pass_fds=(write_info,), env=env)
            finally:
                os.close(write_info)
            self.init_pid = await asyncio.to_thread(_read_child_pid, read_info)
            if not self.init_pid:
                await self._fail_start()
            self.shell_pid = await self._wait_for_shell()
            if self._uses_root_fd:
                self._open_root()
        else:
            env = {"PATH": os.defpath, "HOME": str(self.layout.tree), "LANG": "C.UTF-8"}
            if self.python_environment is not None:
                env |= python_environment_variables(self.python_environment, os.defpath)
            self.process = await self._spawn(shell, cwd=self.layout.tree, env=env)
            self.shell_pid = self.init_pid = self.process.pid
        assert self.process.stdin is not None and self.process.stdout is not None
        pipe = self.process.stdin.get_extra_info("pipe")
        watch = ShellWatch(self.shell_pid, f"pipe:[{os.fstat(pipe.fileno()).st_ino}]")
        if not await watch.learn_baseline():
            await self._fail_start()
        self._protocol = ShellProtocol(
            self.process.stdin,
            self.process.stdout,
            self.config.output_head_chars,
            self.config.output_tail_chars,
            watch,
        )
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        if self.cwd:  # a restarted shell goes back where the last command left it
            await self._run_unlocked(f"cd {_quote(self.cwd)} 2>/dev/null", 10)

    def _open_root(self) -> None:
        """Take the handle on the workspace (see the module docstring). Called before the
        shell has run anything, so the path still leads to the overlay bwrap mounted."""
        fd = os.open(
            f"/proc/{self.init_pid}/root{WORKSPACE}", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
        )
        if self._root_fd is None:
            self._root_fd = fd
        else:
            os.dup2(fd, self._root_fd, inheritable=False)
            os.close(fd)

    def _park_root(self) -> None:
        """Let go of the old mount while keeping the fd number (it leads nowhere useful
        meanwhile: a tool call gets an error, never another file)."""
        if self._root_fd is not None:
            placeholder = os.open(os.devnull, os.O_PATH | os.O_CLOEXEC)
            os.dup2(placeholder, self._root_fd, inheritable=False)
            os.close(placeholder)

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
        await self._shutdown()
        raise SandboxStartError(
            f"the sandbox did not start (exit {code}): {output.decode(errors='replace')}"
        )

    def _healthy(self) -> bool:
        return self.running and self._protocol is not None and self._protocol.watch.idle()

    async def ensure_running(self) -> None:
        """Restart the sandbox if its shell died or no longer waits where the driver does
        (`exit`, `exec`, `kill -9 $$`): same workspace layer, same cwd, a fresh handle on
        the workspace. Call before using `root` after commands ran."""
        async with self._lock:
            await self._ensure_running_unlocked()

    async def _ensure_running_unlocked(self) -> None:
        if not self._healthy():
            await self._restart()
            self._restart_note = RESTARTED

    async def _restart(self) -> None:
        await self._shutdown()
        await self.start()

    async def run(self, command: str, timeout_s: float) -> CommandOutcome:
        async with self._lock:
            await self._ensure_running_unlocked()
            if "processes" in self._notes and self._protocol is not None:
                await self._protocol.discard_pending()  # last words of a killed bomb
            note, self._restart_note = self._restart_note, ""
            outcome = await self._run_unlocked(command, timeout_s)
            return _with_notes(outcome, note, self._take_notes())

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
        if self.disk and self.disk.used > self.config.disk_bytes:
            # Over the quota already: the watcher kills only growth from here, so measure
            # where "here" is (a command that deletes files must be let through).
            await asyncio.to_thread(self.disk.measure)
        self._command_running = True
        try:
            running = await self._protocol.start(command)
            finished = await running.wait(loop.time() + timeout_s)
        finally:
            self._command_running = False
        if finished:
            self.cwd = running.cwd
            return await self._after_command(running)
        if running.shell_gone:
            result = running.result()
            assert self.process is not None
            code = await self.process.wait()
            await self._restart()  # so file tools and the next command find a shell
            return CommandOutcome(
                result.output + "\n[the shell exited; a new one was started]",
                exit_code=code, timed_out=False, truncated_chars=result.cut_chars,
            )  # fmt: skip
        # Timed out: kill what the command started, then let the shell report back.
        self.on_kill("timeout")
        await self.kill_command_processes()
        if not await running.wait(loop.time() + KILL_GRACE_SECONDS):
            # The shell itself is stuck (a builtin loop, a hijacked driver): replace it.
            await self._restart()
        elif not await self._collect_job_notices():
            await self._restart()
        result = running.result()
        return CommandOutcome(
            result.output, exit_code=124, timed_out=True, truncated_chars=result.cut_chars
        )

    async def _collect_job_notices(self) -> bool:
        """Let the shell reap the jobs just killed and print its "Killed" notices into a
        command whose output is dropped, not into the agent's next one. False when the
        shell did not answer."""
        assert self._protocol is not None
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.02)  # the kills reach the shell as SIGCHLD meanwhile
        housekeeping = await self._protocol.start("jobs > /dev/null 2>&1")
        answered = await housekeeping.wait(loop.time() + KILL_GRACE_SECONDS)
        await self._protocol.discard_pending(quiet_seconds=0.02)
        return answered

    async def _after_command(self, running: RunningCommand) -> CommandOutcome:
        result = running.result()
        if self._process_count() >= self._process_trigger():
            await self._breach("processes")
        if "processes" in self._notes and self._protocol is not None:
            await self._protocol.discard_pending()  # last words of a killed bomb
        elif self.cgroup and self.cgroup.oom_killed() and not self._oom_reported:
            self._oom_reported = True  # the cgroup's counter only grows: report once
            self.on_kill("memory")
            self._notes["memory"] = "[a process was killed for exceeding the memory limit]"
        # A command may finish between two polls; measure once more (when cheap).
        disk = self.disk
        if disk and disk.used <= self.config.disk_bytes and disk.seconds_per_walk < 0.05:
            await self._check_disk_now(disk)
        assert result.exit_code is not None
        return CommandOutcome(
            result.output, exit_code=result.exit_code, timed_out=False,
            truncated_chars=result.cut_chars,
        )  # fmt: skip

    async def _check_disk_now(self, disk: DiskQuota) -> None:
        if await asyncio.to_thread(disk.measure) > self.config.disk_bytes:
            await self._breach("disk")

    # --- the watcher ---------------------------------------------------------------

    def _process_trigger(self) -> int:
        if self.cgroup and self.cgroup.dirs:
            return self.config.processes - PROCESS_MARGIN
        if os.geteuid() != 0:
            # RLIMIT_NPROC holds for a user that is not root, but it counts every task of
            # that user on the host: the service's threads and other sandboxes leave this
            # one fewer, and a fork bomb would idle at that lower bound, never reaching
            # `processes`, unless the trigger follows it.
            outside = max(0, self._user_tasks() - self._process_count())
            return max(PROCESS_MARGIN, self.config.processes - outside - PROCESS_MARGIN)
        return self.config.processes

    def _user_tasks(self) -> int:
        """The service user's tasks on the host, counted at most once a second."""
        now = time.monotonic()
        if now - self._user_tasks_at[1] > 1.0:
            self._user_tasks_at = (tasks_of_user(os.getuid()), now)
        return self._user_tasks_at[0]

    def _process_count(self) -> int:
        """Processes of the sandbox, cheaply enough to poll every few milliseconds: a fork
        bomb without a pids cgroup doubles faster than a walk of its tree can count it."""
        if self.cgroup and self.cgroup.dirs:
            return len(self.cgroup.pids())
        if self.backend == "bwrap":
            # The sandbox's own /proc lists exactly its pid namespace, in one directory
            # read; the sandbox cannot mount anything over it.
            with contextlib.suppress(OSError):
                names = os.listdir(f"/proc/{self.init_pid}/root/proc")
                return sum(1 for name in names if name.isdigit()) - 1  # its init
            return len(subtree(self.init_pid))
        return len(subtree(self.shell_pid))

    async def _watch(self) -> None:
        """Poll the process count and the disk usage for as long as the sandbox runs."""
        loop = asyncio.get_running_loop()
        next_disk = loop.time()
        try:
            while self.running:
                await asyncio.sleep(PROCESS_POLL_SECONDS[0 if self._command_running else 1])
                count = self._process_count()  # cheap (see there); no thread hop delay
                if count >= self._process_trigger():
                    await self._breach("processes")
                if self.disk is not None and loop.time() >= next_disk:
                    before = self.disk.used
                    used = await asyncio.to_thread(self.disk.measure)
                    # Over the quota and still growing: a command that only deletes is
                    # left alone, so the agent can free space.
                    if used > self.config.disk_bytes and used > before:
                        await self._breach("disk")
                    pause = DISK_POLL_SECONDS[0 if self._command_running else 1]
                    next_disk = loop.time() + max(pause, 10 * self.disk.seconds_per_walk)
        except asyncio.CancelledError:
            raise
        except Exception:  # the watcher must never take the session down
            log.exception("sandbox watcher of %s failed", self.name)

    async def _breach(self, reason: str) -> None:
        """Stop what broke a limit. Where the pids cgroup holds the count, killing the
        command's processes suffices. Without it (root is exempt from RLIMIT_NPROC) a fork
        bomb can refill freed slots, and a disk filler may be the shell's own loop, so
        the whole sandbox goes (its pid namespace dies with its init, all at once) and is
        restarted with the same workspace and cwd."""
        # Told first: the command may end the moment its processes die, and its output
        # must carry the reason.
        self.on_kill(reason)
        if reason == "processes":
            self._notes[reason] = (
                f"[the process limit of {self.config.processes} was reached; "
                "the command's processes were killed]"
            )
        else:
            used = self.disk.used if self.disk else 0
            self._notes[reason] = (
                f"[the disk quota of {self.config.disk_bytes // MIB} MiB was exceeded "
                f"({used // MIB} MiB used); the command's processes were killed — "
                "delete files to free space]"
            )
        everything = (reason == "processes" and not (self.cgroup and self.cgroup.dirs)) or (
            reason == "disk" and self._command_running
        )
        if everything:
            await asyncio.to_thread(self._kill_everything)
        else:
            await self.kill_command_processes()
            # The killed stay counted until the sandbox's init reaps them; wait for that,
            # so the next check does not see the same bomb again.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 1.0
            while self._process_count() >= self._process_trigger() and loop.time() < deadline:
                await asyncio.sleep(0.01)

    def _kill_everything(self) -> None:
        if self.backend == "bwrap" and self.init_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
            return
        kill_all(self.command_processes)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.shell_pid, signal.SIGKILL)

    def _take_notes(self) -> str:
        notes, self._notes = self._notes, {}
        return "".join(f"\n{note}" for note in notes.values())

    # --- stopping ------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Kill the sandbox's processes and free its cgroup; the workspace handle is
        parked, not closed, so its number stays this sandbox's."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        if self.process is not None:
            if self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
        if self.cgroup is not None:
            await asyncio.to_thread(self.cgroup.remove)
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()
        self._park_root()
        self.process, self._protocol, self.cgroup = None, None, None
        self.shell_pid = self.init_pid = 0

    async def stop(self) -> None:
        await self._shutdown()
        if self._root_fd is not None:
            os.close(self._root_fd)
            self._root_fd = None


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


def _with_notes(outcome: CommandOutcome, before: str, after: str) -> CommandOutcome:
    if not before and not after:
        return outcome
    return CommandOutcome(
        before + outcome.output + after,
        outcome.exit_code,
        outcome.timed_out,
        outcome.truncated_chars,
    )
