"""A run's tasks are drawn across every project in turn, the same for a seed; held-out
projects stay out of training at every hint tier; tasks that cannot be shown at the run's
tiers are skipped with a logged reason."""

from __future__ import annotations

import json
import logging
from collections import Counter

import pytest

from etude.common.run_config import TasksConfig
from etude.tasks.draw import project_of
from etude.tasks.hints import HINT_TIERS
from etude.tasks.materialize import HELD_OUT_PROJECTS, TASKS_FILE
from etude.tasks.task import read_jsonl
from etude.tasks.taskset import load_taskset

ALL = list(read_jsonl(TASKS_FILE))
TRAIN_PROJECTS = {project_of(t) for t in ALL} - HELD_OUT_PROJECTS


def test_the_first_tasks_come_one_from_each_training_project_in_turn():
    train, held_out = load_taskset(TasksConfig(train_limit=25, eval_limit=5))
    projects = [project_of(t) for t in train]
    assert set(projects[:10]) == TRAIN_PROJECTS and projects[10:20] == projects[:10]
    assert Counter(projects).most_common(1)[0][1] == 3
    turns = [project_of(t) for t in held_out]
    assert set(turns[:2]) == HELD_OUT_PROJECTS and turns[2:4] == turns[:2] and len(turns) == 5


def test_the_draw_is_fixed_by_the_seed():
    def ids(seed: int) -> list[str]:
        return [t.id for t in load_taskset(TasksConfig(seed=seed, train_limit=30))[0]]

    assert ids(0) == ids(0)
    assert ids(0) != ids(1)
    whole, _ = load_taskset(TasksConfig())
    assert sorted(t.id for t in whole) == sorted(t.id for t in ALL if t.split == "train")


@pytest.mark.parametrize("tier", HINT_TIERS)
def test_held_out_projects_stay_held_out_at_every_tier(tier):
    config = TasksConfig(hint_tier=tier, eval_tiers=tuple(HINT_TIERS))
    train, held_out = load_taskset(config)
    assert {project_of(t) for t in train} == TRAIN_PROJECTS
    assert {project_of(t) for t in held_out} == HELD_OUT_PROJECTS
    assert len(train) + len(held_out) == len(ALL)  # every bundled task has its hints


def test_tasks_without_hints_are_skipped_at_the_run_s_highest_tier_and_logged(tmp_path, caplog):
    records = [t.to_swe() for t in ALL[:3]]
    records[1]["metadata"] = {k: v for k, v in records[1]["metadata"].items() if k != "hints"}
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    plain, _ = load_taskset(TasksConfig(taskset=str(path)))
    assert len(plain) == 3
    for config in (TasksConfig(taskset=str(path), hint_tier=1),
                   TasksConfig(taskset=str(path), eval_tiers=(0, 2))):  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="etude.tasks.taskset"):
            train, _ = load_taskset(config)
        assert records[1]["instance_id"] not in {t.id for t in train} and len(train) == 2
        assert records[1]["instance_id"] in caplog.text and "has no hints" in caplog.text
    only_unhinted = tmp_path / "bare.jsonl"
    only_unhinted.write_text(json.dumps(records[1]) + "\n")
    with pytest.raises(ValueError, match="no training tasks usable at hint tier 3"):
        load_taskset(TasksConfig(taskset=str(only_unhinted), hint_tier=3))
