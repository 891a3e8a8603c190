"""The two engines behind `grep`: ripgrep when installed, pure Python otherwise.

They must give the same lines for the same tree, so the rules are pinned down here rather than
left to ripgrep's defaults: hidden files are searched and `.git` never; only `.gitignore` files
inside the workspace count (the root's and those below it, never a parent of the workspace, a
global excludes file or `.ignore`); symlinks are not followed; files are visited depth-first in
byte order of their names; a file with a NUL byte in its first 64 KiB is skipped and later ones
are searched up to the line holding the first NUL; a line over 300 bytes (with its newline) is
shown as `GREP_LONG_LINE`. The user's glob filters files after the ignore rules, so it never
re-includes an ignored file (ripgrep's own `-g` would).

Ripgrep reads files by name, so on the host a directory swapped for a symlink to `/` while it
runs would lead it to the host's files. It therefore runs only inside the session's sandbox
(`nsenter` into all its namespaces: `/` is the sandbox's root, absolute link targets and `..`
stay in it); without sandbox namespaces, or where ripgrep cannot run inside, the fd-based
Python engine does the search.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from etude.common.gitignore import Pattern
from etude.common.tool_text import GREP_LONG_LINE, GREP_MAX_COLUMNS, grep_hit, printable
from etude.environment.tools.base import SandboxNamespaces, ToolError
from etude.environment.tools.paths import WorkspacePath
from etude.environment.tools.walk import ancestor_rules, walk

BINARY_SNIFF_BYTES = 64 * 1024
_RG_LONG_LINE = re.compile(rb"\[Omitted long (matching )?line.*\]")


@dataclass(frozen=True, slots=True)
class GrepRequest:
    pattern: str
    target: WorkspacePath
    glob: Pattern | None
    case_insensitive: bool
    timeout_s: float


@dataclass(slots=True)
class Matches:
    """The first `limit` matches as `path:line:text`, and how many there were in all."""

    limit: int
    lines: list[str] = field(default_factory=list)
    total: int = 0

    def add(self, path: str, number: int, text: str) -> None:
        self.total += 1
        if len(self.lines) < self.limit:
            self.lines.append(grep_hit(printable(path), number, printable(text)))


# What ripgrep sees depends only on the user and mount namespaces (and the pid one: its
# /dev/fd is then its own). A service that is not root may not enter the others (they
# belong to the user namespace outside the one `--disable-userns` nests), nor need it.
NSENTER_NAMESPACES = ("--user", "--mount", "--pid")
_EXEC_FAILED = 125
"""nsenter's exit status from here up: it could not enter or could not start ripgrep."""


class RipgrepUnavailable(Exception):
    """Ripgrep could not run inside the sandbox; the caller searches with Python instead."""


def find_ripgrep() -> str | None:
    """The ripgrep binary, or None to use the Python engine (tests patch this)."""
    return shutil.which("rg")


def find_nsenter() -> str | None:
    return shutil.which("nsenter")


def wanted(request: GrepRequest, path: str) -> bool:
    """Whether a file passes the user's glob, matched relative to the searched directory."""
    if request.glob is None or request.target.kind != "dir":
        return True
    base = "/".join(request.target.parts)
    relative = path[len(base) + 1 :] if base else path
    return request.glob.matches(relative, is_dir=False)


# --- ripgrep ----------------------------------------------------------------------------------


async def search_ripgrep(
    rg: str, nsenter: str, inside: SandboxNamespaces, request: GrepRequest, matches: Matches
) -> None:
    """Ripgrep inside the sandbox; `RipgrepUnavailable` (nothing added to `matches`) when it
    cannot run there."""
    with tempfile.TemporaryFile(prefix="etude-grep-") as ignore_file:
        # Reading the ancestors' .gitignore files is file work: off the event loop. The rules
        # reach ripgrep as an inherited fd: the host's /tmp is not visible inside.
        flags = await asyncio.to_thread(_ripgrep_flags, request, ignore_file, inside.workspace)
        enter = [nsenter, f"--target={inside.pid}", *NSENTER_NAMESPACES]
        process = await asyncio.create_subprocess_exec(
            *enter, "--preserve-credentials", "--root", rg, *flags,
            "--", _ripgrep_target(request, inside),
            cwd="/", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, limit=1 << 20, pass_fds=(ignore_file.fileno(),),
            start_new_session=True,  # ripgrep, forked by nsenter, is killed with its group
        )  # fmt: skip
        assert process.stderr is not None
        found = Matches(matches.limit)
        try:
            _, stderr = await asyncio.wait_for(
                asyncio.gather(
                    _read_matches(process, request, found, inside), process.stderr.read()
                ),
                request.timeout_s,
            )
            await process.wait()
        except TimeoutError:
            raise _timeout(request.timeout_s) from None
        finally:
            if process.returncode is None:  # timed out, or the call was cancelled
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
    assert process.returncode is not None
    # nsenter reports its own failures (entering a namespace) with exit 1, like ripgrep's
    # "no match": its message prefix tells them apart.
    if process.returncode >= _EXEC_FAILED or stderr.startswith(b"nsenter:"):
        raise RipgrepUnavailable(stderr.decode("utf-8", "replace")[:300])
    matches.lines, matches.total = found.lines, found.total
    # Exit 1 means no match; 2 means an error, which may come with matches (unreadable files).
    # The pattern is parsed before any file is read, so a parse error is all stderr holds; other
    # messages are not shown, as they may quote files (an ignore file linked to a host file).
    if process.returncode == 2 and stderr.lstrip().startswith((b"regex parse error", b"rg: regex")):
        raise ToolError("invalid_regex", f"invalid regex {request.pattern!r}: {_rg_error(stderr)}")


def _ripgrep_flags(request: GrepRequest, ignore_file: BinaryIO, workspace: str) -> list[str]:
    flags = ["--no-config", "--line-number", "--color", "never"]
    flags += ["--max-columns", str(GREP_MAX_COLUMNS)]
    flags += ["--null", "--with-filename", "--no-heading", "--sort", "path", "--encoding", "none"]
    # Ignore rules: only .gitignore files inside the workspace, with or without a git repo.
    flags += ["--hidden", "--glob", "!.git", "--no-require-git", "--no-ignore-parent"]
    flags += ["--no-ignore-global", "--no-ignore-exclude", "--no-ignore-dot"]
    if request.case_insensitive:
        flags.append("--ignore-case")
    if request.target.kind == "dir" and (lines := _rules_above(request.target, workspace)):
        # Rules from above the searched directory, rewritten relative to the sandbox's root
        # (ripgrep's working directory) because --no-ignore-parent drops them.
        ignore_file.write(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
        ignore_file.flush()
        ignore_file.seek(0)
        # ripgrep runs in the sandbox's pid namespace, so its /dev/fd is its own.
        flags += ["--ignore-file", f"/dev/fd/{ignore_file.fileno()}"]
    return [*flags, "--regexp", request.pattern]


def _rules_above(target: WorkspacePath, workspace: str) -> list[str]:
    frames = ancestor_rules(target, include_start=False).frames()
    inside = workspace.strip("/")
    return [
        pattern.rebased(f"{inside}/{directory}".rstrip("/"))
        for directory, patterns in frames
        for pattern in patterns
    ]


def _ripgrep_target(request: GrepRequest, inside: SandboxNamespaces) -> str:
    # An absolute path: a name starting with "-" is never read as a flag; the prefix is
    # stripped from the output.
    return f"{inside.workspace}/" + "/".join(request.target.parts)


async def _read_matches(
    process: asyncio.subprocess.Process,
    request: GrepRequest,
    matches: Matches,
    inside: SandboxNamespaces,
) -> None:
    assert process.stdout is not None
    prefix = os.fsencode(inside.workspace) + b"/"
    async for raw in process.stdout:
        path_bytes, separator, rest = raw.rstrip(b"\n").partition(b"\0")
        number, colon, text = rest.partition(b":")
        if not separator or not colon or not number.isdigit():
            continue  # a notice such as "binary file matches", not a match
        if not path_bytes.startswith(prefix):
            continue
        path = os.fsdecode(path_bytes[len(prefix) :])
        if not wanted(request, path):
            continue
        shown = GREP_LONG_LINE if _RG_LONG_LINE.fullmatch(text) else text.decode("utf-8", "replace")
        matches.add(path, int(number), shown)


def _rg_error(stderr: bytes) -> str:
    text = stderr.decode("utf-8", "replace")
    reasons = [line[len("error:") :].strip() for line in text.splitlines() if "error:" in line]
    return reasons[-1] if reasons else " ".join(text.split())[:300]


# --- pure Python --------------------------------------------------------------------------------


def compile_regex(pattern: str, case_insensitive: bool) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE if case_insensitive else 0)
    except re.error as error:
        raise ToolError("invalid_regex", f"invalid regex {pattern!r}: {error}") from None


def search_python(request: GrepRequest, matches: Matches) -> None:
    regex = compile_regex(request.pattern, request.case_insensitive)
    deadline = time.monotonic() + request.timeout_s
    for path, data in _files(request):
        if time.monotonic() > deadline:
            raise _timeout(request.timeout_s)
        for number, text in _matching_lines(regex, data):
            matches.add(path, number, text)


def _files(request: GrepRequest) -> Iterator[tuple[str, bytes]]:
    target = request.target
    if target.kind == "file":
        with target.open_read() as file:
            yield target.relative, file.read()
        return
    for entry in walk(target):
        if entry.kind == "file" and wanted(request, entry.path):
            try:
                with entry.open_read() as file:
                    data = file.read()
            except OSError:
                continue  # vanished or unreadable: skipped, as ripgrep skips it
            yield entry.path, data


def _matching_lines(regex: re.Pattern[str], data: bytes) -> Iterator[tuple[int, str]]:
    nul = data.find(b"\0")
    if 0 <= nul < BINARY_SNIFF_BYTES:
        return
    if nul >= 0:
        data = data[: data.rfind(b"\n", 0, nul) + 1]
    lines = data.split(b"\n")
    terminated = [True] * (len(lines) - 1) + [False]
    if lines[-1] == b"":
        lines.pop()  # the file ends with a newline: no extra empty line
    for number, (raw, has_newline) in enumerate(zip(lines, terminated, strict=False), 1):
        text = raw.decode("utf-8", "surrogateescape")
        if regex.search(text):
            # ripgrep counts the newline into --max-columns.
            yield number, GREP_LONG_LINE if len(raw) + has_newline > GREP_MAX_COLUMNS else text


def _timeout(seconds: float) -> ToolError:
    return ToolError(
        "timeout", f"grep stopped after {seconds:g} s; search a smaller path or use a glob"
    )
