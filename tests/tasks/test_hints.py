"""Hint tiers: every bundled task's hints point at the code the fix changes, tier 3 shows
it exactly as read_file would, each tier says what it should and no more, and the hints
come from really running the hidden tests (`etude tasks hints` reproduces the file)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from etude.environment.tools import TOOLS
from etude.environment.tools.base import ToolContext
from etude.tasks.hinting import compute_hints
from etude.tasks.hints import (
    HINT_TIERS,
    HintError,
    Hints,
    at_tier,
    first_changed_line,
    instruction_at_tier,
    locate,
    task_hints,
)
from etude.tasks.materialize import TASKS_FILE, materialize
from etude.tasks.repo import unified_diff
from etude.tasks.task import Task, read_jsonl
from etude.tasks.tracebacks import MAX_LINE_CHARS, TracebackError, first_failure
from tests.tasks.conftest import bwrap  # noqa: F401

TASKS = list(read_jsonl(TASKS_FILE))
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def repositories(tmp_path_factory) -> dict[str, Path]:
    cache = tmp_path_factory.mktemp("tasks")
    return {task.id: materialize(task, cache) for task in TASKS}


def read_file(repository: Path, path: str, start: int, end: int) -> str:
    """What the agent's read_file tool returns for that range (it needs no shell)."""
    ctx = ToolContext("hints", repository, shell=None)  # type: ignore[arg-type]
    call = TOOLS["read_file"].function(ctx, path=path, start_line=str(start), end_line=str(end))
    result = asyncio.run(call)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_bundled_task_has_hints_at_the_code_its_fix_changes(repositories):
    for task in TASKS:
        hints = task_hints(task)
        assert hints.traceback and hints.function, task.id
        lines = hints.traceback.splitlines()
        assert all(len(line) <= MAX_LINE_CHARS for line in lines), task.id
        assert any(line.startswith("E ") for line in lines), task.id
        path, changed = first_changed_line(task.gold_patch, "old")
        assert hints.path == path
        assert hints.source_start <= changed <= hints.source_end, task.id
        assert hints.function.split(".")[-1] in hints.source
        shown = read_file(repositories[task.id], path, hints.source_start, hints.source_end)
        assert hints.source == shown, task.id
        # The lines the fix replaces are the buggy ones, inside the function shown.
        code = {line.split("\t", 1)[1] for line in hints.source.splitlines()}
        for line in task.gold_patch.splitlines():
            if line.startswith("-") and not line.startswith("---"):
                assert line[1:] in code, task.id


def test_each_tier_says_what_it_should_and_no_more():
    task = TASKS[0]
    hints = task_hints(task)
    location = f"The bug is in `{hints.path}`, in `{hints.function}`."
    rendered = {tier: instruction_at_tier(task, tier) for tier in HINT_TIERS}
    assert rendered[0] == task.instruction
    for tier, text in rendered.items():
        assert text.startswith(task.instruction)
        assert (hints.traceback in text) == (tier >= 1)
        assert (location in text) == (tier >= 2)
        assert (hints.source in text) == (tier >= 3)
    assert at_tier(task, 0) is task
    hinted = at_tier(task, 2)
    assert hinted.instruction == rendered[2] and hinted.metadata["hint_tier"] == 2
    assert (hinted.id, hinted.test_patch, hinted.fail_to_pass) == (
        task.id, task.test_patch, task.fail_to_pass,
    )  # fmt: skip
    assert at_tier(hinted, 2) is hinted
    with pytest.raises(HintError, match="at hint tier 2 already"):
        at_tier(hinted, 3)


def test_a_task_without_hints_is_refused_from_tier_1_naming_it():
    bare = Task.from_swe({**TASKS[0].to_swe(), "instance_id": "no-hints"})
    bare.metadata.pop("hints")
    assert at_tier(bare, 0) is bare
    with pytest.raises(HintError, match=r"no-hints has no hints.*etude tasks hints"):
        at_tier(bare, 1)
    with pytest.raises(HintError, match="tier 4"):
        instruction_at_tier(TASKS[0], 4)
    broken = {**TASKS[0].metadata["hints"], "source_end": 0}
    with pytest.raises(HintError, match="source_end"):
        task_hints(Task.from_swe({**TASKS[0].to_swe(), "metadata": {"hints": broken}}))


BUGGY = """\
import re

LIMIT = 30


class Box:
    size = 1

    @property
    def area(self):
        return self.size * self.size

    def grow(self, by):
        def clamp(value):
            return min(value, LIMIT)

        self.size = clamp(self.size + by)
        # Keep the box chainable.
"""


@pytest.mark.parametrize(
    ("before", "after", "function", "span"),
    [
        ("return self.size * self.size", "return self.size ** 2", "Box.area", (9, 11)),
        ("return min(value, LIMIT)", "return max(value, LIMIT)", "Box.grow.clamp", (14, 15)),
        ("LIMIT = 30", "LIMIT = 31", "LIMIT", (3, 3)),
        # An inserted line after a trailing comment belongs to the function above it.
        ("chainable.\n", "chainable.\n        return self\n", "Box.grow", (13, 18)),
    ],
)  # fmt: skip
def test_the_location_is_the_innermost_function_around_the_change(
    tmp_path, before, after, function, span
):
    (tmp_path / "box.py").write_text(BUGGY)
    fixed = BUGGY.replace(before, after)
    task = Task("t", "local", "", "i", "", ("t.py::x",), (),
                gold_patch=unified_diff("box.py", BUGGY, fixed))  # fmt: skip
    hints = locate(task, tmp_path, "tb")
    assert (hints.function, (hints.source_start, hints.source_end)) == (function, span)
    assert hints.source == read_file(tmp_path, "box.py", *span)


def test_a_change_outside_any_function_or_named_assignment_is_reported(tmp_path):
    (tmp_path / "box.py").write_text(BUGGY)
    patch = unified_diff("box.py", BUGGY, BUGGY.replace("import re", "import os"))
    task = Task("odd-task", "local", "", "i", "", ("t.py::x",), (), gold_patch=patch)
    with pytest.raises(HintError, match=r"odd-task: box\.py:1 is in no function"):
        locate(task, tmp_path, "tb")


LIBRARY = """\
import json


def load(text):
    try:
        return json.loads(text)
    except ValueError as error:
        raise KeyError("bad config: " + "x" * 300) from error
"""

TEST = """\
from config import load


def test_load():
    assert load("{") == {}


def test_passes():
    assert load("{}") == {}
"""


@pytest.mark.integration
def test_the_traceback_keeps_repository_frames_and_the_error_that_reached_the_test(
    tmp_path,
    bwrap,  # noqa: F811
):
    (tmp_path / "config.py").write_text(LIBRARY)
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    patch = unified_diff("tests/test_config.py", None, TEST)
    task = Task("t", "local", "", "i", patch, ("tests/test_config.py::test_load",), ())
    excerpt = first_failure(task, tmp_path, bwrap=bwrap).splitlines()
    assert excerpt[:4] == [
        "tests/test_config.py:5: in test_load",
        '    assert load("{") == {}',
        "config.py:8: in load",
        '    raise KeyError("bad config: " + "x" * 300) from error',
    ]
    # The json module's own frames and the exception the library wrapped are left out.
    assert excerpt[4].startswith("E   KeyError: 'bad config: xxx") and excerpt[4].endswith("…")
    assert len(excerpt[4]) == MAX_LINE_CHARS and len(excerpt) == 5
    passing = Task("p", "local", "", "i", patch, ("tests/test_config.py::test_passes",), ())
    with pytest.raises(TracebackError, match="test_passes passed on the buggy repository"):
        first_failure(passing, tmp_path, bwrap=bwrap)


@pytest.mark.integration
def test_recomputed_hints_equal_the_shipped_ones(tmp_path, bwrap):  # noqa: F811
    # One bug raised deep in the library (several frames), one caught by a test assertion.
    for task_id in ("etude-mini.semverkit.swapped_arguments.7f11b478",
                    "etude-mini.throttle.off_by_one.c4ca01a8"):  # fmt: skip
        task = next(t for t in TASKS if t.id == task_id)
        assert compute_hints(task, tmp_path, bwrap) == task_hints(task)


@pytest.mark.integration
def test_the_command_writes_hints_and_names_the_tasks_it_could_not_hint(tmp_path, bwrap):  # noqa: F811
    good = TASKS[0]
    # A FAIL_TO_PASS test that passes on the buggy repository cannot give a traceback.
    record = good.to_swe()
    unfixable = {**record, "instance_id": "etude-mini.unhintable",
                 "FAIL_TO_PASS": [record["PASS_TO_PASS"][0]]}  # fmt: skip
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [json.dumps(record, sort_keys=True), json.dumps(unfixable, sort_keys=True)]
    source.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "etude.cli", "tasks", "hints", str(source), "--out", str(out),
         "--cache", str(tmp_path / "cache"), "--workers", "2"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "etude-mini.unhintable" in done.stderr and "passed on the buggy" in done.stderr
    written = out.read_text().splitlines()
    assert written[0] == lines[0]  # byte for byte what the shipped file holds
    assert "hints" not in json.loads(written[1])["metadata"]
    assert Hints.from_dict(json.loads(written[0])["metadata"]["hints"]) == task_hints(good)
