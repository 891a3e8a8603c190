"""etude-locate, the task family of the learning guard: the bundled records are current,
every one is demonstrated honestly, and the real grader pays the right answer only."""

from __future__ import annotations

import pytest

from etude.common.run_config import TasksConfig
from etude.common.toolcalls import tools_by_name
from etude.environment.tools import tool_specs
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.rollout.scripted_honesty import Episode, Step, derivable_violations
from etude.rollout.scripted_locate import LocateSolver
from etude.rollout.scripted_patch import ScriptError
from etude.tasks.hints import HINT_TIERS, at_tier
from etude.tasks.locate import (
    ANSWER_FILE,
    PLACEHOLDER,
    STUBBED_PER_PROJECT,
    defined_names,
    locate_tasks,
)
from etude.tasks.materialize import (
    HELD_OUT_PROJECTS,
    LOCATE_STUBBED_TASKS_FILE,
    LOCATE_TASKS_FILE,
    materialize,
)
from etude.tasks.repo import unified_diff
from etude.tasks.task import read_jsonl
from etude.tasks.taskset import load_taskset

TOOLS = tools_by_name(tool_specs())
"""The environment's tool specs, which the honesty check parses calls with."""

BUNDLED = list(read_jsonl(LOCATE_TASKS_FILE))
WITH_STUBS = list(read_jsonl(LOCATE_STUBBED_TASKS_FILE))


def test_the_bundled_records_are_what_the_projects_give():
    """A project that changes (a module, a name) must be followed by `python -m
    etude.tasks.locate`, or its tasks would ask about names that moved."""
    assert [t.to_swe() for t in locate_tasks()] == [t.to_swe() for t in BUNDLED]
    stubbed = locate_tasks(stubbed_per_project=STUBBED_PER_PROJECT)
    assert [t.to_swe() for t in stubbed] == [t.to_swe() for t in WITH_STUBS]


def test_every_task_is_demonstrated_honestly_with_its_answer():
    for task in WITH_STUBS:
        turn = LocateSolver(task).next_turn(None)
        assert derivable_violations(Episode(task.instruction, (Step(turn, ()),)), TOOLS) == []
        assert f"<parameter=new_string>\n{task.metadata['answer']}\n" in turn


def test_a_run_trains_on_training_projects_and_holds_out_the_others():
    train, held = load_taskset(TasksConfig(taskset="etude-locate", hint_tier=3))
    assert len(train) + len(held) == len(BUNDLED)
    assert {t.metadata["project"] for t in held} == set(HELD_OUT_PROJECTS)
    assert not {t.metadata["project"] for t in train} & HELD_OUT_PROJECTS
    # drawn across projects: the first ten come from ten projects
    assert len({t.metadata["project"] for t in train[:10]}) == 10
    # the stubbed set trains on the stubs besides, and holds out the very same tasks
    train_stubbed, held_stubbed = load_taskset(TasksConfig(taskset="etude-locate-stubbed",
                                                           hint_tier=3))  # fmt: skip
    assert len(train_stubbed) == len(train) + 10 * STUBBED_PER_PROJECT
    assert sorted(t.id for t in held_stubbed) == sorted(t.id for t in held)


def _listing(task) -> dict[str, list[str]]:
    lines = [line for line in task.instruction.splitlines() if line.startswith("- `")]
    return {line.split("`")[1]: line.split(": ", 1)[1].split(", ") for line in lines}


def test_a_stubbed_repository_defines_exactly_what_its_listing_says(tmp_path):
    """The listing is the repository's truth, stubs included: the policy is never asked to
    trust a module that is not there."""
    stubbed = [t for t in WITH_STUBS if ".stubs" in t.id]
    for task in stubbed[:: len(stubbed) // 6]:
        root = materialize(task, tmp_path)
        listing = _listing(task)
        packages = {path.split("/")[0] for path in listing}
        found = {
            f"{package}/{p.name}": defined_names(p.read_text())
            for package in packages
            for p in sorted((root / package).glob("*.py"))
        }
        assert {path: names for path, names in found.items() if names} == listing
        assert task.metadata["answer"] in listing


def test_stubs_make_up_their_names_and_keep_held_out_projects_unseen():
    """Held-out tasks are the projects' own modules, and no stub takes a name a project
    defines: a held-out name is never seen in training, a real definition never shadowed."""
    held = [t for t in WITH_STUBS if t.metadata["split"] == "held_out"]
    assert held and not [t for t in held if ".stubs" in t.id]
    plain = [t for t in WITH_STUBS if ".stubs" not in t.id]
    stubbed = [t for t in WITH_STUBS if ".stubs" in t.id]

    def names(tasks):
        return {n for t in tasks for listed in _listing(t).values() for n in listed}

    real = names(plain)
    stub_names = names(stubbed) - real
    assert names(stubbed) & real <= names(t for t in plain if t.metadata["split"] == "train")
    # a new deal per task, with names made up for it: nothing to learn by heart
    assert len(stub_names) > 5 * len(stubbed)
    assert len({t.instruction.split("?")[1] for t in stubbed}) == len(stubbed)


@pytest.mark.integration
async def test_the_grader_pays_the_right_path_only(bwrap, tmp_path):
    task = BUNDLED[0]
    grader = Grader(RewardConfig(cache_dir=tmp_path, tasks_files=(), timeout_seconds=60), bwrap)
    wrong = next(p for p in task.instruction.split("`") if p.endswith(".py")
                 and p != task.metadata["answer"])  # fmt: skip
    answers = {
        "right": task.gold_patch,
        "wrong": unified_diff(ANSWER_FILE, f"{PLACEHOLDER}\n", f"{wrong}\n"),
        "untouched": "",
    }
    rewards = {name: (await grader.score(task, patch)).reward for name, patch in answers.items()}
    assert rewards == {"right": 1.0, "wrong": 0.0, "untouched": 0.0}


def test_each_hint_tier_shows_less_of_the_listing_and_only_searching_works_without_it():
    task = BUNDLED[0]
    answer, name = task.metadata["answer"], task.metadata["name"]
    shown = {tier: at_tier(task, tier).instruction for tier in HINT_TIERS}
    assert shown[3] == task.instruction and f"`{answer}`: " in shown[3]
    assert shown[1] == shown[2] and f"- `{answer}`\n" in shown[1] and ": " + name not in shown[1]
    assert answer not in shown[0] and f"defines `{name}`?" in shown[0]
    assert all(at_tier(task, tier).metadata["hint_tier"] == tier for tier in HINT_TIERS)
    # answering from the listing needs the names; searching first needs nothing
    for tier in (0, 1, 2):
        with pytest.raises(ScriptError):
            LocateSolver(at_tier(task, tier), variant=0)
        assert LocateSolver(at_tier(task, tier), variant=1).next_turn(None).count("<function=grep>")
