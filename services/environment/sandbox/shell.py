"""The persistent shell of a session, and the protocol that drives it.

One bash process per session runs a loop: read a nonce and a command (each ended by a
NUL byte) from stdin, `eval` the command in the shell itself — so `cd`, `export`,
functions and activated virtualenvs persist from one call to the next — and print a
marker line `__ETUDE_DONE_<nonce>_<exit code>_<cwd>`. The nonce is fresh per command, so
output cannot forge the end of a command. Reading the command needs no fork, so the shell
still answers when a runaway command has used up the process limit.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass

from etude.environment.sandbox.output import CappedOutput

DRIVER = r"""
while IFS= read -r -d '' __etude_nonce && IFS= read -r -d '' __etude_command; do
  eval "$__etude_command" < /dev/null
  __etude_rc=$?
  printf '\n__ETUDE_DONE_%s_%d_%s\n' "$__etude_nonce" "$__etude_rc" "$PWD"
done
"""

_MARKER = b"\n__ETUDE_DONE_"
_READ_CHUNK = 64 * 1024


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
        self, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader, head: int, tail: int
    ) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.head, self.tail = head, tail
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
    """Output of one command, read until its marker; waiting can resume after a kill."""

    def __init__(self, protocol: ShellProtocol, nonce: bytes) -> None:
        self.protocol = protocol
        self.marker = _MARKER + nonce + b"_"
        self.captured = CappedOutput(protocol.head, protocol.tail)
        self.buffer, protocol.carry = protocol.carry, b""
        self.exit_code: int | None = None
        self.cwd: str | None = None
        self.shell_gone = False

    def _scan(self) -> bool:
        found = self.buffer.find(self.marker)
        if found >= 0:
            end = self.buffer.find(b"\n", found + len(self.marker))
            if end >= 0:
                self.captured.add(self.buffer[:found])
                self.protocol.carry = self.buffer[end + 1 :]
                rc, _, cwd = self.buffer[found + len(self.marker) : end].partition(b"_")
                self.exit_code, self.cwd = int(rc), cwd.decode(errors="replace")
                self.buffer = b""
                return True
            return False
        # Keep enough to hold a marker split across reads, with its cwd.
        keep = len(self.marker) + 4096
        if len(self.buffer) > keep:
            self.captured.add(self.buffer[:-keep])
            self.buffer = self.buffer[-keep:]
        return False

    async def wait(self, deadline: float) -> bool:
        """Read until the marker (True) or until `deadline`, in loop time (False)."""
        loop = asyncio.get_running_loop()
        while not self._scan():
            remaining = deadline - loop.time()
            if remaining <= 0 or self.shell_gone:
                return False
            try:
                chunk = await asyncio.wait_for(self.protocol.stdout.read(_READ_CHUNK), remaining)
            except TimeoutError:
                return False
            if not chunk:
                self.shell_gone = True
                return False
            self.buffer += chunk
        return True

    def result(self) -> ShellResult:
        if self.buffer:
            self.captured.add(self.buffer)
            self.buffer = b""
        text, cut = self.captured.text()
        return ShellResult(text, cut, self.exit_code, self.cwd)
