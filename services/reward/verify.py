"""Checking tasks end to end with the grader: on the buggy repository every FAIL_TO_PASS
test fails and every PASS_TO_PASS test passes; with the gold patch all pass. And grading
one patch, as the reward service would.

It lives with the grader it drives (`etude tasks verify` and `grade` call it): the task
library does not depend on the reward service, which depends on it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.reward.types import Score
from etude.sandbox.bwrap import Bwrap
from etude.sandbox.config import SandboxConfig
from etude.tasks.materialize import PROJECTS_DIR
from etude.tasks.provisioning import TaskProvisioning
from etude.tasks.sources import RepositorySources
from etude.tasks.task import Task


@dataclass(frozen=True, slots=True)
class Verdict:
    task_id: str
    ok: bool
    problem: str = ""


async def grade_patch(
    task: Task, patch: str, config: RewardConfig, bwrap: Bwrap | None,
    sandbox: SandboxConfig | None = None, sources: RepositorySources | None = None,
    provisioning: TaskProvisioning | None = None,
) -> Score:  # fmt: skip
    """One patch graded as the reward service grades it (`etude tasks grade`); `sources`
    and `provisioning` as for `verify_all`."""
    return await Grader(config, bwrap, sandbox, sources).score(task, patch, provisioning)


async def verify_task(
    grader: Grader, task: Task, provisioning: TaskProvisioning | None = None
) -> Verdict:
    """Raises EnvironmentBuildError when `provisioning` wants the task an environment
    that cannot be built."""
    buggy = await grader.score(task, "", provisioning)
    if buggy.error:
        return Verdict(task.id, False, buggy.error)
    still_passing = [t for t, passed in buggy.fail_to_pass.items() if passed]
    broken = [t for t, passed in buggy.pass_to_pass.items() if not passed]
    if still_passing or broken:
        return Verdict(task.id, False, f"buggy: passing {still_passing}, failing {broken}")
    fixed = await grader.score(task, task.gold_patch, provisioning)
    if fixed.reward != 1.0:
        failing = [t for t, p in (fixed.fail_to_pass | fixed.pass_to_pass).items() if not p]
        return Verdict(task.id, False, f"gold patch leaves failing {failing} {fixed.error}")
    return Verdict(task.id, True)


async def verify_all(
    tasks: list[Task], cache_dir: Path, bwrap: Bwrap | None, concurrency: int = 2,
    projects_dir: Path = PROJECTS_DIR, on_done=lambda verdict: None,
    sandbox: SandboxConfig | None = None, sources: RepositorySources | None = None,
    provisioning: TaskProvisioning | None = None,
) -> list[Verdict]:  # fmt: skip
    """`sandbox`: grading's limits and binds (`SandboxConfig.for_grading()`), so a task is
    verified as the reward service will grade it; unset, the defaults. `sources`: where
    the repositories of tasks that are not bundled come from (etude.tasks.sources).
    `provisioning`: as a run prepares its tasks, their Python environments included
    (etude.tasks.provisioning; its sources replace `sources`); None: no environment, the
    tests run on the interpreter etude runs on."""
    config = RewardConfig(cache_dir=cache_dir, projects_dir=projects_dir)
    grader = Grader(config, bwrap, sandbox, sources)
    limit = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> Verdict:
        async with limit:
            verdict = await verify_task(grader, task, provisioning)
        on_done(verdict)
        return verdict

    return await asyncio.gather(*(one(t) for t in tasks))
