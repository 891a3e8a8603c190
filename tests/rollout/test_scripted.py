"""The scripted solver writes honest demonstrations: for every training task at every hint
tier, in every style, each argument follows from what the agent was shown, and the episode
fixes the task. Checked on every task with the solver's in-process reading of the repository
(fast), and on a sample in real sandboxed sessions, where the results the agent reads are the
environment's own (and must be what the solver expected)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from etude.common.toolcalls import ToolCall, render_tool_calls, tools_by_name
from etude.environment.local import InProcessEnvironment
from etude.environment.tools import tool_specs
from etude.environment.types import ExecutedCall, ToolOutput
from etude.rollout.scripted import ScriptedSolver, ScriptError
from etude.rollout.scripted_honesty import (
    Episode,
    ShownResult,
    Step,
    derivable_violations,
    play,
)
from etude.rollout.scripted_patch import parse_patch
from etude.rollout.scripted_styles import style_for, tier_styles
from etude.tasks.materialize import materialize
from etude.tasks.repo import unified_diff
from etude.tasks.task import Task
from tests.environment.conftest import make_manager
from tests.rollout.demonstrations import (
    TRAIN_TASKS,
    fixed_text,
    hinted_tasks,
    sample,
)
from tests.tasks.conftest import bwrap  # noqa: F401

TOOLS = tools_by_name(tool_specs())
"""The environment's tool specs, which the honesty check parses calls with."""

MAX_DROPPED_SHARE = 0.02
"""Demonstrations a tier may lose for want of an honest way to the fix."""


def calls_of(episode: Episode) -> list[list[ToolCall]]:
    from etude.common.toolcalls import parse_tool_calls, tools_by_name
    from etude.environment.tools import tool_specs

    tools = tools_by_name(tool_specs())
    return [parse_tool_calls(step.turn, tools=tools).calls for step in episode.steps]


def edited(solver: ScriptedSolver, episode: Episode) -> dict[str, str]:
    """The files as the episode's edits leave the buggy repository (each old_string must
    occur exactly once, as edit_file requires)."""
    files: dict[str, str] = {}
    for call in (c for turn in calls_of(episode) for c in turn if c.name == "edit_file"):
        path, old, new = (call.arguments[k] for k in ("path", "old_string", "new_string"))
        text = files.get(path, "".join(solver.repository.files[path]))
        assert text.count(old) == 1, (path, old)
        files[path] = text.replace(old, new)
    return files


def offline(task: Task, tier: int, variant: int) -> tuple[ScriptedSolver, Episode]:
    solver = ScriptedSolver(task, tier=tier, variant=variant)
    return solver, asyncio.run(play(solver, TOOLS))


def tier_tasks(tier: int) -> list[Task]:
    return TRAIN_TASKS if tier == 0 else list(hinted_tasks())


@pytest.mark.parametrize("tier", [0, 1, 2, 3])
def test_every_training_task_gets_an_honest_fix_at_the_tier(tier):
    """Two styles per task (the baseline and one more, in turn), so every style is played
    on a share of the tasks."""
    styles = len(tier_styles(tier))
    tasks = tier_tasks(tier)
    dropped, played = [], 0
    for index, task in enumerate(tasks):
        for variant in (0, 1 + index % (styles - 1)):
            try:
                solver, episode = offline(task, tier, variant)
            except ScriptError as error:
                dropped.append(f"{task.id} v{variant}: {error}")
                continue
            played += 1
            assert derivable_violations(episode, TOOLS) == [], (task.id, variant)
            for path, text in edited(solver, episode).items():
                assert text == fixed_text(task, path), (task.id, variant, path)
            assert calls_of(episode)[-1][-1].name == "submit"
    assert len(dropped) <= MAX_DROPPED_SHARE * (played + len(dropped)), dropped


@pytest.mark.integration
async def test_real_sessions_show_what_the_solver_expected_and_the_fix_lands(tmp_path, bwrap):  # noqa: F811
    """The sample at every tier, one style each, in real sessions: honest on the real
    results, each grep and read_file result exactly what the solver's own reading predicted,
    and the session's diff the gold patch."""
    manager = make_manager(tmp_path)
    environment = InProcessEnvironment(manager)
    hinted = {t.id: t for t in hinted_tasks()}
    try:
        for index, task in enumerate(sample(TRAIN_TASKS)):
            repository = materialize(task, tmp_path / "tasks")
            tiers = [0] + ([1, 2, 3] if task.id in hinted else [])
            for tier in tiers:
                shown = hinted.get(task.id, task)
                variant = index % len(tier_styles(tier))
                solver = ScriptedSolver(shown, repository, tier=tier, variant=variant)
                session = (await environment.create_session(task.id, str(repository))).session_id
                unexpected: list[tuple[str, dict]] = []

                async def execute(calls, session=session, solver=solver, unexpected=unexpected):
                    results = await environment.execute(session, calls)
                    for call, executed in zip(calls, results, strict=True):
                        read_only = call.name in ("grep", "read_file")
                        simulated = solver.simulate(call).result.output
                        if read_only and simulated != executed.result.output:
                            unexpected.append((call.name, call.arguments))
                    return results

                episode = await play(solver, TOOLS, execute)
                diff = (await environment.diff(session)).unified_diff
                await environment.close_session(session)
                assert derivable_violations(episode, TOOLS) == [], (task.id, tier)
                assert unexpected == [], (task.id, tier)
                assert parse_patch(diff) == parse_patch(task.gold_patch), (task.id, tier)
    finally:
        await manager.close_all()


@pytest.fixture
async def searching_environment(tmp_path, bwrap):  # noqa: F811
    """Sessions with codebase_search: a real search service (MiniLM) on loopback."""
    from etude.common.grpc_server import ServiceRuntime
    from etude.common.settings import ClientSettings, GrpcSettings
    from etude.environment.search_client import GrpcSearchBackend
    from etude.search.config import SearchConfig
    from etude.search.embedders import load_embedder
    from etude.search.embedding_cache import CachedEmbedder, EmbeddingCache
    from etude.search.engine import SearchEngine
    from etude.search.server import SearchServicer, registration

    cache = EmbeddingCache(tmp_path / "embeddings.sqlite3")
    engine = SearchEngine(
        SearchConfig(index_roots=(tmp_path,)), CachedEmbedder(load_embedder("minilm"), cache)
    )
    settings = GrpcSettings(port=0, drain_seconds=0)
    runtime = ServiceRuntime("search", settings, [registration(SearchServicer(engine))])
    await runtime.start()
    backend = GrpcSearchBackend(runtime.address, ClientSettings(max_attempts=1))
    manager = make_manager(tmp_path, search=backend)
    yield InProcessEnvironment(manager)
    await manager.close_all()
    await backend.close()
    await runtime.shutdown()


@pytest.mark.integration
async def test_a_search_by_meaning_first_is_honest_on_the_real_index(
    searching_environment, tmp_path
):
    environment = searching_environment
    for task in sample(TRAIN_TASKS, extra=0)[:2]:
        variant = next(
            v for v in range(1, 8) if style_for(task.id, 0, v).first_search == "codebase_search"
        )
        repository = materialize(task, tmp_path / "tasks")
        solver = ScriptedSolver(task, repository, variant=variant)
        session = (await environment.create_session(task.id, str(repository))).session_id
        episode = await play(solver, TOOLS, lambda calls, s=session: environment.execute(s, calls))
        diff = (await environment.diff(session)).unified_diff
        await environment.close_session(session)
        first = episode.steps[0].results[0]
        assert (first.name, first.exit_code) == ("codebase_search", 0)
        assert first.output.count(" (") >= 1  # hits with their ranges and scores
        assert derivable_violations(episode, TOOLS) == []
        assert parse_patch(diff) == parse_patch(task.gold_patch)


# -- the checker catches what is not derivable ---------------------------------------------

TASK = TRAIN_TASKS[0]  # calcparse: `_Evaluator.call`, which the statement does not name


def turn(prose: str, *calls: ToolCall) -> str:
    numbered = [ToolCall(c.name, c.arguments, f"call_{i}") for i, c in enumerate(calls)]
    return f"{prose}\n{render_tool_calls(numbered)}"


def test_the_checker_catches_the_old_first_turn_and_other_invented_arguments():
    assert "call" not in TASK.instruction
    old_first = turn(
        "The failing tests point at `call`; I'll search for it and read "
        "calcparse/evaluator.py around line 167.",
        ToolCall("grep", {"pattern": r"\bcall\b", "path": "calcparse", "glob": "*.py"}),
        ToolCall("read_file", {"path": "calcparse/evaluator.py", "start_line": "157",
                               "end_line": "177"}),
    )  # fmt: skip
    problems = derivable_violations(Episode(TASK.instruction, (Step(old_first, ()),)), TOOLS)
    assert problems == [
        "turn 1: prose names `call`, not shown",
        "turn 1: grep: pattern words not shown: call",
        "turn 1: read_file: calcparse/evaluator.py was not shown",
    ]

    # The module is named by the statement's `calcparse.evaluator.CalcEvalError` elsewhere,
    # but not in this one: an unseen path, then a range with no shown line of the file.
    grep = ToolCall("grep", {"pattern": "builtin", "path": "calcparse", "glob": "*.py"})
    hits = "calcparse/evaluator.py:163:        builtin = BUILTINS.get(node.name)"
    far = ToolCall("read_file", {"path": "calcparse/evaluator.py", "start_line": "10",
                                 "end_line": "20"})  # fmt: skip
    near = ToolCall("read_file", {"path": "calcparse/evaluator.py", "start_line": "160",
                                  "end_line": "170"})  # fmt: skip
    edit = ToolCall("edit_file", {"path": "calcparse/evaluator.py",
                                  "old_string": "        count = len(args)",
                                  "new_string": "        count = len(args) + 0"})  # fmt: skip
    steps = (
        Step(turn("I'll search for `builtin`.", grep), (ShownResult("call_0", "grep", 0, hits),)),
        Step(turn("Far from the hit.", far), ()),
        Step(turn("Near the hit.", near), ()),
        Step(turn("Editing what I never read.", edit), ()),
    )
    problems = derivable_violations(Episode(TASK.instruction, steps), TOOLS)
    assert problems == [
        "turn 2: read_file: no line of calcparse/evaluator.py in 10-20 was shown",
        "turn 4: edit_file: old_string was not shown in a listing of calcparse/evaluator.py",
    ]


def test_the_checker_accepts_a_blind_edit_only_from_source_the_instruction_shows():
    hinted = next(t for t in hinted_tasks() if t.id == TASK.id)
    _, episode = offline(hinted, 3, 0)
    assert [c.name for turn in calls_of(episode) for c in turn] == ["edit_file", "submit"]
    assert derivable_violations(episode, TOOLS) == []
    # The same turns under the bare statement name and quote code the agent never saw.
    assert derivable_violations(Episode(hinted.instruction, episode.steps), TOOLS) == [
        "turn 1: prose names `_Evaluator.call`, not shown",
        "turn 1: edit_file: calcparse/evaluator.py was not shown",
        "turn 2: prose names `_Evaluator.call`, not shown",
    ]
    # Shown the file but not those lines, the quote is still unseen.
    listing = "   200\t    def other(self) -> None:"
    shown = f"{hinted.instruction}\n\n`calcparse/evaluator.py`:\n{listing}"
    assert derivable_violations(Episode(shown, episode.steps[:1]), TOOLS)[1:] == [
        "turn 1: edit_file: old_string was not shown in a listing of calcparse/evaluator.py",
    ]


# -- styles ------------------------------------------------------------------------------


def test_each_variant_is_a_fixed_style_and_the_variants_cover_the_tier():
    for tier in (0, 3):
        styles = tier_styles(tier)
        assert len(set(styles)) == len(styles)
        for task in TRAIN_TASKS[:5]:
            chosen = [style_for(task.id, tier, v) for v in range(len(styles))]
            assert chosen[0] == styles[0] and set(chosen) == set(styles)
            assert chosen == [style_for(task.id, tier, v) for v in range(len(styles))]
    orders = {tuple(style_for(t.id, 0, v) for v in range(1, 8)) for t in TRAIN_TASKS[:10]}
    assert len(orders) > 1  # the order of the other styles differs between tasks


def test_variants_differ_in_the_ways_rl_can_select_between():
    for task in sample(TRAIN_TASKS, extra=0):
        for variant in range(len(tier_styles(0))):
            solver, episode = offline(task, 0, variant)
            style, turns = solver.style, calls_of(episode)
            widths = [len(calls) for calls in turns]
            assert (max(widths) >= 2) == style.parallel, (task.id, style, widths)
            searches = [c.name for calls in turns for c in calls
                        if c.name in ("grep", "codebase_search")]  # fmt: skip
            assert searches[0] == style.first_search
            names = [c.name for calls in turns for c in calls]
            assert ("run_terminal_command" in names) == style.smoke
            assert names.index("read_file") < names.index("edit_file")
    hinted = next(iter(hinted_tasks()))
    for variant in range(len(tier_styles(3))):
        solver, episode = offline(hinted, 3, variant)
        names = [c.name for calls in calls_of(episode) for c in calls]
        first_edit = names.index("edit_file")
        assert ("read_file" in names[:first_edit]) == solver.style.read_first
        assert ("run_terminal_command" in names) == solver.style.smoke


# -- the script itself ---------------------------------------------------------------------

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
async def test_a_patch_of_two_hunks_is_two_unique_edits_after_a_batch_of_reads(tmp_path, bwrap):  # noqa: F811
    task = synthetic_task(tmp_path / "repo")
    assert task.gold_patch.count("\n@@ ") == 2
    manager = make_manager(tmp_path)
    environment = InProcessEnvironment(manager)
    session = (await environment.create_session(task.id, task.repo)).session_id
    try:
        solver = ScriptedSolver(task, Path(task.repo))
        episode = await play(solver, TOOLS, lambda calls: environment.execute(session, calls))
        assert derivable_violations(episode, TOOLS) == []
        look, read, fix = calls_of(episode)[:3]
        # The statement names the file, not the functions: list what it defines first.
        assert look[0].arguments == {"pattern": "(def|class) ", "path": "pkg/counter.py",
                                     "max_results": "10"}  # fmt: skip
        # One read per function, both in one parallel batch.
        assert [(c.name, c.arguments["start_line"]) for c in read] == [
            ("read_file", "2"),
            ("read_file", "15"),
        ]
        assert [c.name for c in fix] == ["edit_file", "edit_file", "run_terminal_command"]
        assert fix[0].arguments["old_string"].count("\n") >= 1  # widened to be unique
        cat = ToolCall("run_terminal_command", {"command": "cat pkg/counter.py"})
        shown = await environment.execute(session, [cat])
        assert shown[0].result.output.startswith(FIXED)
    finally:
        await manager.close_all()


def test_a_task_without_a_gold_patch_cannot_be_scripted():
    with pytest.raises(ScriptError, match="no gold patch"):
        ScriptedSolver(Task("t", "etude-mini/calcparse", "", "Fix it.", "", (), ()))


def test_a_fix_that_creates_a_file_cannot_be_scripted(tmp_path):
    task = synthetic_task(tmp_path / "repo")
    creating = unified_diff("pkg/extra.py", None, "VALUE = 1\n")
    with pytest.raises(ScriptError, match="creates or deletes"):
        ScriptedSolver(Task(task.id, task.repo, "", "", "", (), (), gold_patch=creating))


def test_the_same_task_tier_and_variant_give_the_same_turns():
    for task in TRAIN_TASKS[::40]:
        for variant in (0, 3):
            first, second = offline(task, 0, variant)[1], offline(task, 0, variant)[1]
            assert [s.turn for s in first.steps] == [s.turn for s in second.steps]


def test_a_failed_call_stops_the_script():
    solver = ScriptedSolver(TASK)
    solver.next_turn(None)
    failed = ExecutedCall("call_0", "grep", ToolOutput.error("not_found", "no such file"), 0.0)
    with pytest.raises(ScriptError, match="grep failed"):
        solver.next_turn([failed])
