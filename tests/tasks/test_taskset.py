"""A run's tasks are drawn across every project in turn, the same for a seed; held-out
projects stay out of training at every hint tier; tasks that cannot be shown at the run's
tiers are skipped with a logged reason. Task sets are read from JSONL (Parquet and datasets
directories where their packages are installed) and registered with their run in a real
Redis, where a task is found by run, with where the run's tasks are built from."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from etude.common.run_config import TasksConfig
from etude.tasks.draw import project_of
from etude.tasks.hints import HINT_TIERS
from etude.tasks.materialize import HELD_OUT_PROJECTS, TASKS_FILE
from etude.tasks.provisioning import DEFAULT_PROVISIONING, TaskProvisioning
from etude.tasks.pyenv import PackageSource
from etude.tasks.sources import RepositorySources
from etude.tasks.store import TaskNotFoundError
from etude.tasks.task import read_jsonl
from etude.tasks.taskset import RunTasks, TaskSetError, load_taskset, read_tasks, select_tasks

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


# -- reading task sets in other forms ------------------------------------------------------


def test_a_missing_or_broken_task_set_gets_a_clear_error(tmp_path):
    with pytest.raises(TaskSetError, match=r"no task set 'nowhere.jsonl'.*etude-mini"):
        read_tasks("nowhere.jsonl")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(ALL[0].to_swe()) + "\n" + json.dumps({"repo": "x"}) + "\n")
    with pytest.raises(TaskSetError, match=r"broken.jsonl:2: task record lacks"):
        read_tasks(str(broken))
    twice = tmp_path / "twice.jsonl"
    twice.write_text(json.dumps(ALL[0].to_swe()) + "\n" + json.dumps(ALL[0].to_swe()) + "\n")
    with pytest.raises(TaskSetError, match="1 task ids repeat"):
        load_taskset(TasksConfig(taskset=str(twice)))


def test_parquet_and_dataset_directories_are_read_or_the_missing_package_is_named(tmp_path):
    records = [t.to_swe() for t in ALL[:3]]
    for record in records:  # as columnar exports keep it
        record["metadata"] = json.dumps(record["metadata"])
    parquet_path, dataset_dir = tmp_path / "tasks.parquet", tmp_path / "dataset"
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        parquet_path.write_bytes(b"PAR1")
        with pytest.raises(TaskSetError, match="needs the `pyarrow` package"):
            read_tasks(str(parquet_path))
    else:
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(records), parquet_path)
        assert [t.id for t in read_tasks(str(parquet_path))] == [t.id for t in ALL[:3]]
        assert read_tasks(str(parquet_path))[0] == ALL[0]
    try:
        import datasets
    except ImportError:
        dataset_dir.mkdir()
        with pytest.raises(TaskSetError, match=r"needs the\s+`datasets` package"):
            read_tasks(str(dataset_dir))
    else:
        datasets.Dataset.from_list(records).save_to_disk(str(dataset_dir))
        assert [t.id for t in read_tasks(str(dataset_dir))] == [t.id for t in ALL[:3]]


# -- registered with the run ---------------------------------------------------------------


@pytest.fixture
async def run_tasks(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield RunTasks(client, prefix="t", runs_cached=1)
    await client.aclose()


async def test_a_run_s_tasks_are_registered_once_and_read_back_in_order(run_tasks, tmp_path):
    config = TasksConfig(train_limit=4, eval_limit=2)
    first = await run_tasks.ensure("r1", config)
    assert (len(first.train), len(first.held_out), first.source) == (4, 2, "etude-mini")
    assert (first.train, first.held_out) == load_taskset(config)
    # Registered: a changed config or file later changes nothing for this run (a resume).
    again = await run_tasks.ensure("r1", TasksConfig(train_limit=1, eval_limit=0))
    assert again == first
    assert await run_tasks.get("r1", first.held_out[1].id) == first.held_out[1]
    # Given records (what `etude runs start` sends) are selected the same way.
    copies = [dataclasses.replace(t, id=f"mine-{t.id}") for t in ALL[:3]]
    mine = await run_tasks.ensure("r2", TasksConfig(taskset="my.jsonl"), copies)
    assert sorted(t.id for t in mine.train) == sorted(t.id for t in copies if t.split == "train")
    assert mine.source == "my.jsonl"


async def test_a_run_s_provisioning_is_registered_with_its_tasks_and_kept(run_tasks):
    """Where a run's tasks are built from travels with them; a resume with another config
    keeps what was registered, and a registration from before provisioning had the defaults."""
    config = TasksConfig(
        train_limit=1, eval_limit=0, environments="off",
        sources={"repositories": {"acme/x": "/srv/x"}, "checkouts": ["/srv/mirrors"],
                 "projects": ["/srv/p.tar.gz"]},
        packages={"index_url": "https://pypi.example/simple"},
    )  # fmt: skip
    registered = await run_tasks.ensure("r", config)
    expected = TaskProvisioning(
        RepositorySources({"acme/x": Path("/srv/x")}, (Path("/srv/mirrors"),),
                          (Path("/srv/p.tar.gz"),)),
        PackageSource(None, "https://pypi.example/simple"), "off",
    )  # fmt: skip
    assert registered.provisioning == expected
    assert (await run_tasks.selection("r")).provisioning == expected
    assert await run_tasks.provisioning("r") == expected
    resumed = await run_tasks.ensure("r", TasksConfig(train_limit=1, eval_limit=0))
    assert resumed.provisioning == expected
    with pytest.raises(TaskNotFoundError, match="run 'bare' has no registered task set"):
        await run_tasks.provisioning("bare")
    # Registered by an older etude: no provisioning in the selection.
    await run_tasks.redis.set("t:run:old:taskset", json.dumps({"source": "x", "train": [],
                                                              "held_out": []}))  # fmt: skip
    assert await run_tasks.provisioning("old") == DEFAULT_PROVISIONING
    assert DEFAULT_PROVISIONING.environments == "auto"


def test_a_run_wants_python_environments_for_tasks_that_are_not_bundled():
    auto = TaskProvisioning.from_config(TasksConfig())
    off = TaskProvisioning.from_config(TasksConfig(environments="off"))
    theirs = dataclasses.replace(ALL[0], repo="acme/x")
    assert [auto.wants_environment(t) for t in (ALL[0], theirs)] == [False, True]
    assert not off.wants_environment(theirs)
    assert TaskProvisioning.from_json(auto.to_json()) == auto
    with pytest.raises(ValueError, match="environments 'sometimes'"):
        TaskProvisioning.from_json({**auto.to_json(), "environments": "sometimes"})
    with pytest.raises(ValueError, match="malformed task provisioning"):
        TaskProvisioning.from_json({"environments": "auto"})


async def test_a_task_the_run_does_not_have_is_not_found_naming_the_run(run_tasks):
    with pytest.raises(TaskNotFoundError, match="run 'bare' has no registered task set"):
        await run_tasks.get("bare", ALL[0].id)
    taskset = await run_tasks.ensure("r", TasksConfig(train_limit=2, eval_limit=0))
    with pytest.raises(TaskNotFoundError, match="run 'r' has no task 'ghost'"):
        await run_tasks.get("r", "ghost")
    # Another run's tasks are not this run's.
    await run_tasks.ensure("other", TasksConfig(taskset="etude-locate", train_limit=1))
    with pytest.raises(TaskNotFoundError):
        await run_tasks.get("other", taskset.train[0].id)
    assert await run_tasks.get("r", taskset.train[0].id) == taskset.train[0]


@pytest.mark.parametrize("task_id", ["../../etc", ".hidden", "a/b", "", 7])
def test_a_task_id_that_cannot_name_a_directory_is_refused(task_id):
    task = dataclasses.replace(ALL[0], id=task_id)
    with pytest.raises(TaskSetError, match="must match"):
        select_tasks([task], TasksConfig())
