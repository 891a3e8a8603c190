"""The synthesizer on real (tiny) projects, in real sandboxes: kept bugs are caught by
their FAIL_TO_PASS tests and fixed by the inverse patch; rebuilding is deterministic; each
layout real projects use makes tasks that verify."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from etude.reward.verify import verify_all
from etude.sandbox.config import SandboxConfig
from etude.tasks.materialize import build_buggy_repository
from etude.tasks.repo import apply_patch, copy_files
from etude.tasks.sources import RepositorySources
from etude.tasks.synth.sources import opened
from etude.tasks.synth.synthesize import SynthOptions, kept_mutants, load_project, to_task
from etude.tasks.testrun import run_pytest
from tests.tasks.layouts import (
    COLORPARSE,
    DATEPARTS,
    TEXTBITS,
    UNITCONV,
    tar_sdist,
    write,
    zip_sdist,
)

pytestmark = pytest.mark.integration


def synthesize(project_root: Path, bwrap, seed: int, count: int = 3):
    project = load_project(project_root)
    options = SynthOptions(seed=seed, per_project=count, max_failing=4, workers=2)
    tasks = []
    for kept in kept_mutants(project, options, bwrap):
        commit = build_buggy_repository(
            project, to_task(project, kept, options, "").metadata["bug_patch"],
            Path(tempfile.mkdtemp(dir=project_root.parent)),
        )  # fmt: skip
        tasks.append(to_task(project, kept, options, commit))
    return project, tasks


def test_kept_bugs_fail_their_tests_and_the_gold_patch_fixes_them(tiny_project, bwrap, tmp_path):
    project, tasks = synthesize(tiny_project, bwrap, seed=1)
    assert len(tasks) == 3
    for task in tasks:
        assert 1 <= len(task.fail_to_pass) <= 4
        assert set(task.fail_to_pass).isdisjoint(task.pass_to_pass)
        assert "mathbits/core.py" not in task.instruction  # never points at the bug
        workdir = tmp_path / task.id
        copy_files(project.root, workdir, project.files)
        apply_patch(workdir, task.metadata["bug_patch"])
        buggy = run_pytest(workdir, task.test_command, bwrap=bwrap,
                           config=SandboxConfig(), timeout_s=60)  # fmt: skip
        assert set(buggy.failing) == set(task.fail_to_pass)
        apply_patch(workdir, task.gold_patch)
        fixed = run_pytest(workdir, task.test_command, bwrap=bwrap,
                           config=SandboxConfig(), timeout_s=60)  # fmt: skip
        assert fixed.failing == []
        assert set(fixed.outcomes) == set(task.fail_to_pass) | set(task.pass_to_pass)


def test_the_same_seed_keeps_the_same_bugs_and_commits(tiny_project, bwrap):
    _, first = synthesize(tiny_project, bwrap, seed=7, count=2)
    _, second = synthesize(tiny_project, bwrap, seed=7, count=2)
    assert [t.id for t in first] == [t.id for t in second]
    assert [t.base_commit for t in first] == [t.base_commit for t in second]
    _, other = synthesize(tiny_project, bwrap, seed=8, count=2)
    assert [t.id for t in other] != [t.id for t in first]


def test_the_repository_has_one_commit_and_no_hidden_tests(tiny_project, bwrap, tmp_path):
    project, [task] = synthesize(tiny_project, bwrap, seed=3, count=1)
    repo = tmp_path / "repo"
    commit = build_buggy_repository(project, task.metadata["bug_patch"], repo)
    assert commit == task.base_commit
    log = subprocess.run(["git", "log", "--oneline"], cwd=repo, capture_output=True, text=True)
    assert len(log.stdout.splitlines()) == 1
    assert not (repo / "tests").exists()


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("textbits", lambda d: tar_sdist(d, "tb-1.2.0", TEXTBITS)),  # tests/, plugin addopts
        ("colorparse", lambda d: write(d / "my-colours", COLORPARSE)),  # test/, a skipped test
        ("unitconv", lambda d: zip_sdist(d, "unitconv-0.1", UNITCONV)),  # inside the package
        # Warnings are errors, and pytest warns of the suite (as in python-dateutil 2.9).
        ("dateparts", lambda d: tar_sdist(d, "dateparts-1.0", DATEPARTS)),
    ],
)
async def test_each_layout_makes_tasks_that_verify_from_their_source(tmp_path, bwrap, name, source):
    path = source(tmp_path)
    options = SynthOptions(seed=0, per_project=1, max_failing=4, workers=2)
    with opened(path) as project:
        [kept] = list(kept_mutants(project, options, bwrap))
        draft = to_task(project, kept, options, "")
        commit = build_buggy_repository(project, draft.metadata["bug_patch"], tmp_path / "build")
        task = to_task(project, kept, options, commit)
        assert task.repo == name and task.metadata["project"] == name  # the real project
        assert task.id.startswith(f"{name}.") and task.metadata["origin"]
    # The grader rebuilds the repository from the source given again (an sdist unpacked
    # afresh), the hidden tests coming from the record alone.
    sources = RepositorySources(projects=(path,))
    [verdict] = await verify_all([task], tmp_path / "cache", bwrap, sources=sources)
    assert verdict.ok, verdict.problem


def test_the_limits_bound_the_tries(tiny_project, bwrap):
    project = load_project(tiny_project)
    tried = []
    options = SynthOptions(per_project=20, max_tries=3, workers=2)
    kept = list(kept_mutants(project, options, bwrap, lambda t, k, o: tried.append(t)))
    assert tried == [1, 2, 3] and len(kept) <= 3
    tried.clear()
    out_of_time = SynthOptions(per_project=20, time_limit_s=1e-9, workers=2)
    assert list(kept_mutants(project, out_of_time, bwrap, lambda t, k, o: tried.append(t))) == []
    assert tried == []
