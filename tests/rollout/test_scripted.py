"""The scripted solver plays bundled tasks through the real codec, a real environment session
and the real grader, and solves them in a short episode that opens with a batch of reads."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from etude.common.toolcalls import ParsedTurn, ToolCall, parse_tool_calls, tools_by_name
from etude.environment.batch import ExecutedCall
from etude.environment.client import InProcessEnvironment
from etude.environment.sessions import SessionManager
from etude.environment.tools import tool_specs
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.rollout.scripted import ScriptedSolver, ScriptError
from etude.tasks.materialize import TASKS_FILE, materialize
from etude.tasks.repo import unified_diff
from etude.tasks.task import Task, read_jsonl
from tests.environment.conftest import make_config
from tests.tasks.conftest import bwrap  # noqa: F401

TOOLS = tools_by_name(tool_specs())
TASKS = list(read_jsonl(TASKS_FILE))


def sample(tasks: list[Task], extra: int = 3) -> list[Task]:
    """Every project and every mutation kind at least once (ids read
    `etude-mini.<project>.<mutation>.<hash>`), in few tasks, and a few more at random."""
    chosen: list[Task] = []
    projects: set[str] = set()
    kinds: set[str] = set()
    for new_needed in (2, 1):  # first tasks that bring a new project and a new kind
        for task in tasks:
            _, project, kind, _ = task.id.split(".")
            if (project not in projects) + (kind not in kinds) >= new_needed:
                chosen.append(task)
                projects.add(project)
                kinds.add(kind)
    rest = [t for t in tasks if t not in chosen]
    return chosen + random.Random(7).sample(rest, extra)


async def play(
    solver: ScriptedSolver, environment: InProcessEnvironment, session: str, max_turns: int = 8
) -> list[tuple[ParsedTurn, list[ExecutedCall]]]:
    """The agent loop's moves: parse each turn, run its calls as one batch, hand the results
    back, until a call ends the episode."""
    episode: list[tuple[ParsedTurn, list[ExecutedCall]]] = []
    results = None
    while not any(r.ends_episode for r in results or ()):
        assert len(episode) < max_turns, "the script never submits"
        turn = parse_tool_calls(solver.next_turn(results), tools=TOOLS)
        assert turn.ok, turn.errors
        results = await environment.execute(session, turn.calls, parallel=True)
        episode.append((turn, results))
    return episode


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tasks")


@pytest.fixture
async def environment(tmp_path, bwrap):  # noqa: F811
    manager = SessionManager(make_config(tmp_path))
    yield InProcessEnvironment(manager)
    await manager.close_all()


@pytest.mark.integration
@pytest.mark.parametrize("task", sample(TASKS), ids=lambda task: task.id)
async def test_the_script_solves_the_task_in_a_short_episode(task, environment, cache, bwrap):  # noqa: F811
    repository = materialize(task, cache)
    session = (await environment.create_session(task.id, str(repository))).session_id
    episode = await play(ScriptedSolver(task), environment, session)

    assert len(episode) <= 5
    first = episode[0][0]
    assert len(first.calls) >= 2 and {"grep", "read_file"} <= {c.name for c in first.calls}
    assert first.text  # one line of reasoning before the calls
    for turn, results in episode:
        assert [c.id for c in turn.calls] == [f"call_{i}" for i in range(len(turn.calls))]
        assert [(r.name, r.exit_code) for r in results] == [(c.name, 0) for c in turn.calls]
    assert episode[-1][0].calls[-1].name == "submit"
    assert any(c.name == "edit_file" for turn, _ in episode for c in turn.calls)

    diff = (await environment.diff(session)).unified_diff
    grader = Grader(RewardConfig(cache_dir=cache, tasks_files=(), timeout_seconds=60), bwrap)
    score = await grader.score(task, diff)
    assert score.reward == 1.0, (score.error, score.fail_to_pass)


BUGGY = """\
class Counter:
    def __init__(self, start):
        self.total = start
        self.steps = 0

    def restart(self, start):
        self.total = start
        self.steps = 0

    def step(self, amount):
        self.total += amount
        return self.total


def describe(counter):
    lines = []
    lines.append(f"total: {counter.total}")
    return "\\n".join(lines)


def scale(values, factor):
    return [value * factor for value in values]
"""
# The bug on line 3 also stands on line 7, so quoting it needs more lines to be unique; and a
# statement is missing from `describe`. Two hunks, the second an insertion.
FIXED = BUGGY.replace(
    "(self, start):\n        self.total = start", "(self, start):\n        self.total = 0", 1
).replace("    lines = []\n", '    lines = []\n    lines.append(f"steps: {counter.steps}")\n')


def synthetic_task(root: Path) -> Task:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "counter.py").write_text(BUGGY)
    patch = unified_diff("pkg/counter.py", BUGGY, FIXED)
    return Task(
        "synthetic.counter", str(root), "", "Fix pkg/counter.py.", "", (), (), gold_patch=patch
    )


@pytest.mark.integration
async def test_a_patch_of_two_hunks_is_two_unique_edits_in_one_turn(tmp_path, environment):
    task = synthetic_task(tmp_path / "repo")
    assert task.gold_patch.count("\n@@ ") == 2
    session = (await environment.create_session(task.id, task.repo)).session_id
    episode = await play(ScriptedSolver(task, Path(task.repo)), environment, session)

    (look, _), (fix, _) = episode[:2]
    assert look.calls[0].arguments["pattern"] == r"\bCounter\b"  # `__init__` names its class
    assert [c.name for c in look.calls] == ["grep", "read_file"]  # the two spans share a window
    assert [c.name for c in fix.calls] == ["edit_file", "edit_file"]
    assert fix.calls[0].arguments["old_string"].count("\n") >= 1  # widened to be unique
    assert all(r.exit_code == 0 for _, results in episode for r in results)
    cat = ToolCall("run_terminal_command", {"command": "cat pkg/counter.py"})
    shown = await environment.execute(session, [cat])
    assert shown[0].output.startswith(FIXED)


def test_a_task_without_a_gold_patch_cannot_be_scripted():
    with pytest.raises(ScriptError, match="no gold patch"):
        ScriptedSolver(Task("t", "etude-mini/calcparse", "", "Fix it.", "", (), ()))


def test_a_fix_that_creates_a_file_cannot_be_scripted(tmp_path):
    task = synthetic_task(tmp_path / "repo")
    creating = unified_diff("pkg/extra.py", None, "VALUE = 1\n")
    with pytest.raises(ScriptError, match="creates or deletes"):
        ScriptedSolver(Task(task.id, task.repo, "", "", "", (), (), gold_patch=creating))


def test_the_same_task_gives_the_same_turns():
    def turns(task: Task) -> list[str]:
        solver = ScriptedSolver(task)
        played = [solver.next_turn(None)]
        while not solver.done:
            played.append(solver.next_turn([]))
        return played

    for task in TASKS[::40]:
        assert turns(task) == turns(task)
        assert len(turns(task)) == 4


def test_a_failed_call_stops_the_script():
    solver = ScriptedSolver(TASKS[0])
    solver.next_turn(None)
    failed = ExecutedCall(
        "call_1", "read_file", "no such file", 1, False, 0, 0.0, "not_found", False
    )
    with pytest.raises(ScriptError, match="read_file failed"):
        solver.next_turn([failed])
