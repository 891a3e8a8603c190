"""The persistent shell of a session, and the protocol that drives it.

One bash process per session runs a loop: read a nonce and a command (each ended by a
NUL byte) from stdin, `eval` the command in the shell itself — so `cd`, `export`,
functions and activated virtualenvs persist from one call to the next — and print a
marker line `__ETUDE_DONE_<nonce>_<exit code>_<cwd>`. Reading the command needs no fork,
so the shell still answers when a runaway command has used up the process limit.

Why the marker alone cannot be trusted: the command runs in the very process that prints
the marker, so it can read the nonce (`$__etude_nonce`), every fd the driver holds (bash
keeps redirected fds at 10 and up), even redefine `read` or `printf`. A command could
print a marker, return "exit 0" at once and keep running. So a marker only *proposes* an
end; the host accepts it once it sees, in the kernel's own account of the shell
(`/proc/<shell>/syscall`, `/proc/<shell>/fd/0`), that the shell is back where the driver
waits for the next command: blocked in `read` on fd 0, fd 0 still the host's pipe, with
the same buffer, stack pointer and instruction pointer it had when it first waited there,
before any command ran. Code inside `eval` that reads stdin does so from deeper in the
stack; a foreground child leaves the shell in `wait4`, not `read`. While the shell is not
idle, markers are plain output; when it is, the last marker is the driver's (the driver
blocks right after printing it). A command that never lets the shell get back is killed
at its timeout like any other, and a shell whose idle point changed (a hijacked driver,
`exec` of another program) is replaced. The exit code and cwd in the marker are what the
command's shell says: a command can lie to itself about its own exit code, not about
when it ended.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from etude.sandbox.output import CappedOutput

DRIVER = r"""
while IFS= read -r -d '' __etude_nonce && IFS= read -r -d '' __etude_command; do
  eval "$__etude_command" < /dev/null
  __etude_rc=$?
  printf '\n__ETUDE_DONE_%s_%d_%s\n' "$__etude_nonce" "$__etude_rc" "$PWD"
done
"""

_MARKER = b"\n__ETUDE_DONE_"
_READ_CHUNK = 64 * 1024
_POLL_SECONDS = 0.005
# Output after a proposed marker that is kept while the shell is checked; a real marker
# is confirmed within milliseconds, so more than this after one means it was not real.
_MAX_AFTER_MARKER = 1024 * 1024
_READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}.get(os.uname().machine, "0")


def idle_signature(pid: int) -> tuple[str, ...] | None:
    """Where `pid` is blocked, from /proc/<pid>/syscall: (number, fd, buffer, count, stack
    pointer, instruction pointer); None while it runs or cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return None
    if len(fields) != 9:  # "running", or "-1 sp pc" (blocked outside a syscall)
        return None
    return (*fields[0:4], *fields[7:9])


def stdin_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/fd/0")
    except OSError:
        return None


class ShellWatch:
    """The host's view of the shell: whether it is idle where the driver waits."""

    def __init__(self, pid: int, stdin_pipe: str) -> None:
        self.pid = pid
        self.stdin_pipe = stdin_pipe  # "pipe:[inode]" of the host's end
        self.baseline: tuple[str, ...] | None = None

    async def learn_baseline(self, timeout_s: float = 10.0) -> bool:
        """Record the driver's idle point; call before any command was sent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            found = idle_signature(self.pid)
            if found and found[0] == _READ_SYSCALL and found[1] == "0x0" and self._own_stdin():
                self.baseline = found
                return True
            await asyncio.sleep(_POLL_SECONDS)
        return False

    def _own_stdin(self) -> bool:
        return stdin_of(self.pid) == self.stdin_pipe

    def idle(self) -> bool:
        if self.baseline is None:
            return False
        return idle_signature(self.pid) == self.baseline and self._own_stdin()


@dataclass(frozen=True, slots=True)
class ShellResult:
    output: str
    cut_chars: int
    exit_code: int | None
    """None when the command did not finish (timeout, or the shell died)."""
    cwd: str | None


class ShellProtocol:
    """Speaks the driver's protocol over a process's stdin and (merged) stdout."""

    def __init__(
        self,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        head: int,
        tail: int,
        watch: ShellWatch,
    ) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.head, self.tail = head, tail
        self.watch = watch
        self.carry = b""  # output that arrived after a marker (from background jobs)

    async def discard_pending(self, quiet_seconds: float = 0.05, limit_seconds: float = 1.0):
        """Drop output already on its way (last words of killed processes) until the pipe
        has been quiet for `quiet_seconds`, so it is not shown as the next command's."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_seconds
        self.carry = b""
        while loop.time() < deadline:
            try:
                chunk = await asyncio.wait_for(self.stdout.read(_READ_CHUNK), quiet_seconds)
            except TimeoutError:
                return
            if not chunk:
                return

    async def start(self, command: str) -> RunningCommand:
        nonce = secrets.token_hex(8).encode()
        self.stdin.write(nonce + b"\0" + command.replace("\0", "").encode() + b"\0")
        await self.stdin.drain()
        return RunningCommand(self, nonce)


class RunningCommand:
    """Output of one command, read until its end is confirmed; waiting can resume after a
    kill."""

    def __init__(self, protocol: ShellProtocol, nonce: bytes) -> None:
        self.protocol = protocol
        self.marker = re.compile(re.escape(_MARKER + nonce + b"_") + rb"(\d+)_([^\n]*)\n")
        self.marker_room = len(_MARKER) + len(nonce) + 4096  # a marker split across reads
        self.captured = CappedOutput(protocol.head, protocol.tail)
        self.buffer, protocol.carry = protocol.carry, b""
        self.proposed: re.Match[bytes] | None = None
        """The last marker seen in `buffer`, which starts at it."""
        self.exit_code: int | None = None
        self.cwd: str | None = None
        self.shell_gone = False

    def _scan(self) -> None:
        """Find the last marker in the buffer; everything before it is output."""
        last = None
        for last in self.marker.finditer(self.buffer):  # noqa: B007 - the last one counts
            pass
        if last is not None:
            self.captured.add(self.buffer[: last.start()])
            self.buffer = self.buffer[last.start() :]
            self.proposed = self.marker.match(self.buffer)
            return
        if self.proposed is not None:
            if len(self.buffer) - self.proposed.end() > _MAX_AFTER_MARKER:
                self.proposed = None  # a real one would have been confirmed long ago
            else:
                return
        if len(self.buffer) > self.marker_room:
            self.captured.add(self.buffer[: -self.marker_room])
            self.buffer = self.buffer[-self.marker_room :]

    def _accept(self) -> None:
        assert self.proposed is not None
        found = self.proposed
        self.exit_code = int(found[1])
        self.cwd = found[2].decode(errors="replace")
        self.protocol.carry = self.buffer[found.end() :]
        self.buffer = b""

    async def wait(self, deadline: float) -> bool:
        """Read until a marker is confirmed by the shell's state (True) or until
        `deadline`, in loop time (False)."""
        loop = asyncio.get_running_loop()
        while True:
            self._scan()
            if self.proposed is not None and self.protocol.watch.idle():
                await self._drain_ready()
                self._scan()  # what the driver printed last is in the pipe by now
                self._accept()
                return True
            remaining = deadline - loop.time()
            if remaining <= 0 or self.shell_gone:
                return False
            if self.proposed is not None:
                remaining = min(remaining, _POLL_SECONDS)
            try:
                chunk = await asyncio.wait_for(self.protocol.stdout.read(_READ_CHUNK), remaining)
            except TimeoutError:
                continue
            if not chunk:
                self.shell_gone = True
                return False
            self.buffer += chunk

    async def _drain_ready(self) -> None:
        """Take what is already in the pipe, without waiting for more (bounded: a background
        job may keep writing)."""
        for _ in range(16):
            try:
                chunk = await asyncio.wait_for(self.protocol.stdout.read(_READ_CHUNK), 0.001)
            except TimeoutError:
                return
            if not chunk:
                return
            self.buffer += chunk

    def result(self) -> ShellResult:
        if self.buffer:
            self.captured.add(self.buffer)
            self.buffer = b""
        text, cut = self.captured.text()
        return ShellResult(text, cut, self.exit_code, self.cwd)
