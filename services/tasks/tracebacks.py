"""The first failing test's traceback, from running the hidden tests on the buggy repository.

The excerpt is what a developer reads first: a few `path:line: in function` frames of the
repository (tests included; the interpreter's and pytest's own frames are dropped), each
with its source line, ending where the failure is raised or asserted, then pytest's `E`
lines (the error and its explanation). Lines are cut so a huge repr cannot flood a prompt.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from etude.sandbox.bwrap import Bwrap
from etude.sandbox.config import SandboxConfig
from etude.tasks.repo import apply_patch
from etude.tasks.task import Task
from etude.tasks.testrun import run_pytest

MAX_FRAMES = 3
MAX_ERROR_LINES = 6
MAX_LINE_CHARS = 160
# Object addresses in reprs (`<Limiter object at 0x7f95…>`, or only their last digits where
# pytest shortened a repr to `head...d5c0>`) differ on every run; masked, the same task
# always gets the same excerpt.
_ADDRESS = re.compile(r"\b0x[0-9a-f]{6,}\b|(?<=\.\.\.)[0-9a-f]{1,12}(?=>|&gt;)")

_FRAME = re.compile(r"^(\S[^:]*):(\d+): in \S+")
# pytest's reports of failed tests: a section, then per test a heading (`____ test_x[a] ____`,
# as few as one `_` each side for a long name), frames and error lines.
_RESULTS = re.compile(r"^=+ (FAILURES|ERRORS) =+$")
_TEST_HEADING = re.compile(r"^_+ \S.* _+$")
_SECTION_END = re.compile(r"^(={3,} |-{3,} Captured )")
_CHAINED = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)


class TracebackError(RuntimeError):
    """The failing test did not fail, or its report holds no traceback."""


def first_failure(
    task: Task,
    repository: Path,
    *,
    bwrap: Bwrap | None,
    sandbox: SandboxConfig | None = None,
    timeout_s: float = 60.0,
) -> str:
    """Run the task's first FAIL_TO_PASS test on a copy of its buggy `repository` with
    the hidden tests installed (`--tb=short`), and excerpt its traceback."""
    if not task.fail_to_pass:
        raise TracebackError(f"task {task.id} has no FAIL_TO_PASS test")
    test_id = task.fail_to_pass[0]
    with tempfile.TemporaryDirectory(prefix="etude-hints-") as scratch:
        workdir = Path(scratch) / "repo"
        shutil.copytree(repository, workdir, symlinks=True)
        apply_patch(workdir, task.test_patch)
        run = run_pytest(
            workdir, f"{task.test_command} --tb=short", bwrap=bwrap,
            config=sandbox or SandboxConfig(), timeout_s=timeout_s,
            test_paths=(test_id,), options_from=repository,
        )  # fmt: skip
    if run.timed_out:
        raise TracebackError(f"task {task.id}: {test_id} ran past {timeout_s:.0f}s")
    outcome = run.outcomes.get(test_id, "not run")
    if outcome not in {"failed", "error"}:
        raise TracebackError(f"task {task.id}: {test_id} {outcome} on the buggy repository")
    found = excerpt(run.output)
    if not found:
        raise TracebackError(f"task {task.id}: pytest's report of {test_id} has no traceback")
    return found


def excerpt(output: str) -> str:
    """The frames and error lines of the first test report in pytest `--tb=short` output."""
    report = _first_report(output)
    # Of a chain of exceptions, the last is the one that reached the test.
    chained = [i for i, line in enumerate(report) if line.strip() in _CHAINED]
    if chained:
        report = report[chained[-1] + 1 :]
    frames: list[list[str]] = []
    errors: list[str] = []
    for line in report:
        if line.startswith("E "):
            errors.append(line)
        elif match := _FRAME.match(line):
            frames.append([line] if _in_repository(match.group(1)) else [])
        elif frames and frames[-1] and line.startswith("    ") and len(frames[-1]) == 1:
            frames[-1].append(line)  # the frame's source line
    kept = [line for frame in [f for f in frames if f][-MAX_FRAMES:] for line in frame]
    return "\n".join(_cut(line) for line in [*kept, *errors[:MAX_ERROR_LINES]])


def _first_report(output: str) -> list[str]:
    lines = output.splitlines()
    section = next((i for i, line in enumerate(lines) if _RESULTS.match(line)), None)
    if section is None or section + 1 >= len(lines) or not _TEST_HEADING.match(lines[section + 1]):
        return []
    start = section + 2
    end = next(
        (i for i in range(start, len(lines))
         if _SECTION_END.match(lines[i]) or _TEST_HEADING.match(lines[i])),
        len(lines),
    )  # fmt: skip
    return lines[start:end]


def _in_repository(path: str) -> bool:
    """pytest prints paths under the rootdir relative to it and all others absolute."""
    return not path.startswith(("/", "..", "<"))


def _cut(line: str) -> str:
    line = _ADDRESS.sub(lambda m: "0x…" if m[0].startswith("0x") else "…", line.rstrip())
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"
