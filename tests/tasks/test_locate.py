"""etude-locate, the task family of the learning guard: the bundled records are current,
every one is demonstrated honestly, and the real grader pays the right answer only."""

from __future__ import annotations

import pytest

from etude.common.run_config import TasksConfig
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.rollout.scripted_honesty import Episode, Step, derivable_violations
from etude.rollout.scripted_locate import LocateSolver
from etude.tasks.locate import ANSWER_FILE, PLACEHOLDER, locate_tasks
from etude.tasks.materialize import HELD_OUT_PROJECTS, LOCATE_TASKS_FILE
from etude.tasks.repo import unified_diff
from etude.tasks.task import read_jsonl
from etude.trainer.taskset import load_taskset

BUNDLED = list(read_jsonl(LOCATE_TASKS_FILE))


def test_the_bundled_records_are_what_the_projects_give():
    """A project that changes (a module, a name) must be followed by `python -m
    etude.tasks.locate`, or its tasks would ask about names that moved."""
    assert [t.to_swe() for t in locate_tasks()] == [t.to_swe() for t in BUNDLED]


def test_every_task_is_demonstrated_honestly_with_its_answer():
    for task in BUNDLED:
        turn = LocateSolver(task).next_turn(None)
        assert derivable_violations(Episode(task.instruction, (Step(turn, ()),))) == []
        assert f"<parameter=new_string>\n{task.metadata['answer']}\n" in turn


def test_a_run_trains_on_training_projects_and_holds_out_the_others():
    train, held = load_taskset(TasksConfig(taskset="etude-locate", hint_tier=3))
    assert len(train) + len(held) == len(BUNDLED)
    assert {t.metadata["project"] for t in held} == set(HELD_OUT_PROJECTS)
    assert not {t.metadata["project"] for t in train} & HELD_OUT_PROJECTS
    # drawn across projects: the first ten come from ten projects
    assert len({t.metadata["project"] for t in train[:10]}) == 10


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
