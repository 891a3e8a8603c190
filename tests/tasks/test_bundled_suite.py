"""etude-mini: every project's suite passes, and the shipped tasks hold up (a fixed sample
here; `make verify-tasks` checks all of them)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from etude.reward.verify import verify_all
from etude.tasks.materialize import PROJECTS_DIR, TASKS_FILE, materialize
from etude.tasks.synth.synthesize import load_project
from etude.tasks.task import read_jsonl
from tests.conftest import skip_without_sandboxes

pytestmark = pytest.mark.integration

PROJECTS = sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "tests").is_dir())


def test_the_suite_has_at_least_twelve_projects():
    assert len(PROJECTS) >= 12


@pytest.mark.parametrize("name", PROJECTS)
def test_every_bundled_project_passes_its_own_suite(name):
    project = load_project(PROJECTS_DIR / name)
    lines = sum(len((project.root / f).read_text().splitlines()) for f in project.source_files)
    assert lines >= 200
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project.root, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]
    passed = int(done.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 20


def test_at_least_200_tasks_ship_split_by_project():
    tasks = list(read_jsonl(TASKS_FILE))
    assert len(tasks) >= 200
    assert len({t.id for t in tasks}) == len(tasks)
    projects_by_split: dict[str, set[str]] = {}
    for task in tasks:
        projects_by_split.setdefault(task.split, set()).add(task.metadata["project"])
    assert set(projects_by_split) == {"train", "held_out"}
    assert projects_by_split["train"].isdisjoint(projects_by_split["held_out"])
    kinds = Counter(t.metadata["mutation"] for t in tasks)
    assert len(kinds) >= 5, kinds


async def test_a_sample_of_shipped_tasks_is_caught_and_fixed(tmp_path):
    from etude.sandbox.bwrap import find_bwrap

    with skip_without_sandboxes():
        bwrap = find_bwrap(None)
    sample = random.Random(2026).sample(list(read_jsonl(TASKS_FILE)), 3)
    verdicts = await verify_all(sample, tmp_path / "cache", bwrap, concurrency=2)
    assert [v.problem for v in verdicts] == ["", "", ""]
    assert all(v.ok for v in verdicts)


def test_a_cache_inside_another_repository_builds_the_same_commit(tmp_path):
    # A cache under a checkout (`.etude/tasks` in a clone) sits inside a git repository;
    # the task's bug patch must still apply to the task's own files.
    outer = tmp_path / "checkout"
    outer.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=outer, check=True)
    task = next(read_jsonl(TASKS_FILE))
    repository = materialize(task, outer / ".etude" / "tasks")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repository, capture_output=True, text=True
    ).stdout.strip()
    assert head == task.base_commit
