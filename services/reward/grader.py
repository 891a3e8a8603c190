"""Grading a patch: apply it to a fresh copy of the task's base repository (never the
agent's own workspace), put test files and test infrastructure back as the base has
them, refuse code that reaches into the test runner, install the hidden tests and the
canaries, run them in a sandbox with the sessions' binds and grading's limits, and turn
the per-test results into a reward and its components.

The patch is hostile input (the policy is optimised against this reward): every path it
names is confined to the copy (`changes.py`), the test run cannot be configured by it
(`etude.tasks.testrun`), and an outcome that cannot be trusted scores 0 with
`tampered` = 1 and the reason in `Score.error` (`tamper.py`, `canaries.py`). A patch
after which the suite cannot run at all (a test module that stops importing) scores 0
with `the suite could not run: …`: a broken fix, not a forgery.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from etude.reward.canaries import plant
from etude.reward.changes import changed_paths, regular_file, restore
from etude.reward.class_index import ClassIndex
from etude.reward.config import RewardConfig
from etude.reward.functions import REWARD_FUNCTIONS, Outcome
from etude.reward.patch_size import PatchTooLarge, check_expansion
from etude.reward.tamper import added_lines, decode, is_reverted, runner_access
from etude.reward.types import Score
from etude.sandbox.bwrap import Bwrap
from etude.sandbox.config import SandboxConfig
from etude.sandbox.reclaim import Reclaimed, owned_dir, reclaim_cgroups, reclaim_owned_dirs
from etude.tasks.grading_config import UnsupportedTestCommand, command_args
from etude.tasks.materialize import materialize
from etude.tasks.provisioning import TaskProvisioning, python_environment
from etude.tasks.repo import PatchError, apply_patch
from etude.tasks.sources import RepositorySources
from etude.tasks.task import Task
from etude.tasks.testrun import GRADING_CGROUPS, run_pytest

SCRATCH_DIR = "grading"
"""Under the reward's cache: one directory per grading process, its patched copies."""
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
_PLAIN_FILE = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)


def patched_files(patch: str) -> list[str]:
    names = {b for _a, b in _DIFF_FILE.findall(patch)} or set(_PLAIN_FILE.findall(patch))
    return sorted(n for n in names if n != "/dev/null")


class Grader:
    def __init__(
        self, config: RewardConfig, bwrap: Bwrap | None, sandbox: SandboxConfig | None = None,
        sources: RepositorySources | None = None,
    ) -> None:  # fmt: skip
        """`sandbox`: the limits and binds of the test run, grading's from the settings
        (`RewardSettings.sandbox.for_grading()`); unset, the defaults. `sources`: where the
        repositories of tasks that are not bundled come from (etude.tasks.sources), besides
        `config.checkouts_dir`."""
        if config.reward_function not in REWARD_FUNCTIONS:
            known = ", ".join(sorted(REWARD_FUNCTIONS))
            raise ValueError(f"unknown reward function {config.reward_function!r}; known: {known}")
        assert config.cache_dir is not None
        self.config = config
        self.bwrap = bwrap
        self.sandbox = sandbox or SandboxConfig()
        self.sources = (sources or RepositorySources()).with_checkouts(config.checkouts_dir)
        self._materialize_lock = asyncio.Lock()

    async def score(
        self, task: Task, patch: str, provisioning: TaskProvisioning | None = None
    ) -> Score:
        """`provisioning`: where the task's run builds it from (its registered sources, its
        Python environment); None: this grader's own sources, no environment. Raises
        MaterializeError or EnvironmentBuildError when the task cannot be built here."""
        started = time.perf_counter()
        sources = self.sources
        if provisioning is not None:
            sources = provisioning.sources.with_checkouts(self.config.checkouts_dir)
            provisioning = dataclasses.replace(provisioning, sources=sources)
        cache_dir, projects_dir = self.config.cache_dir, self.config.projects_dir
        async with self._materialize_lock:  # two graders must not build one repository
            base = await asyncio.to_thread(
                materialize, task, cache_dir, projects_dir, sources=sources
            )
        environment = None
        if provisioning is not None:
            # Built once, under its own lock across processes: not under the grader's.
            environment = await asyncio.to_thread(
                python_environment, task, provisioning, cache_dir, projects_dir
            )
        score = await asyncio.to_thread(self._grade, task, patch, base, environment)
        return Score(
            score.reward, score.components, score.fail_to_pass, score.pass_to_pass,
            time.perf_counter() - started, score.error, score.timed_out,
        )  # fmt: skip

    @functools.cached_property
    def _scratch(self) -> Path:
        """Where patched copies go: on the service's own disk, never the host's /tmp
        (bounded by the repository and the patch's checked expansion; the tests themselves
        write only in the sandbox), under this process's own directory, which the next
        grader to start reclaims if this one is killed mid-grading (`reclaim_leftovers`)."""
        assert self.config.cache_dir is not None
        return owned_dir(self.config.cache_dir / SCRATCH_DIR)

    def _grade(self, task: Task, patch: str, base: Path, environment: Path | None) -> Score:
        components = {
            "patch_lines": float(sum(1 for line in patch.splitlines() if line[:1] in "+-")),
            "touched_tests": 0.0,
            "reverted_files": 0.0,
            "runner_access": 0.0,
            "tampered": 0.0,
        }
        with tempfile.TemporaryDirectory(prefix="etude-grade-", dir=self._scratch) as scratch:
            workdir = Path(scratch) / "repo"
            shutil.copytree(base, workdir, symlinks=True)
            try:
                check_expansion(patch, workdir, self.config.max_patch_expanded_bytes)
                apply_patch(workdir, patch)
            except PatchTooLarge as error:
                return Score(0.0, components, error=str(error))
            except PatchError as error:
                return Score(0.0, components, error=f"the patch does not apply: {error}")
            hidden = set(patched_files(task.test_patch))
            changes = changed_paths(base, workdir)
            reverted = [p for p in changes if is_reverted(p) and p not in hidden]
            for path in reversed(reverted):  # deepest first: a reverted directory goes last
                restore(base, workdir, path)
            components["touched_tests"] = float(bool(reverted) or bool(hidden & set(changes)))
            components["reverted_files"] = float(len(reverted))
            kept = [p for p in changes if p not in hidden and p not in reverted]
            changed, findings = self._inspect(base, workdir, kept)
            if findings:
                components |= {"runner_access": float(len(findings)), "tampered": 1.0}
                shown = "; ".join(map(str, findings[:5]))
                return Score(0.0, components, error=f"tampered: runner access: {shown}")
            try:
                self._install_hidden_tests(base, workdir, task)
            except PatchError as error:
                message = f"the task's hidden tests do not apply: {error}"
                return Score(0.0, components, error=message)
            test_files = sorted(
                {t.split("::")[0] for t in (*task.fail_to_pass, *task.pass_to_pass)}
            )
            present = [f for f in test_files if regular_file(workdir, f) is not None]
            if (size := _tree_bytes(workdir)) > self.config.workspace_bytes * 0.9:
                error = (
                    f"the repository ({size} bytes) does not fit grading's workspace "
                    f"({self.config.workspace_bytes} bytes, ETUDE_REWARD__WORKSPACE_BYTES)"
                )
                return Score(0.0, components, error=error)
            try:
                planting = plant(
                    workdir, present, task.fail_to_pass, task.pass_to_pass,
                    odds=self.config.canary_odds, max_copies=self.config.canary_copies,
                    max_cases=self.config.canary_cases,
                    keep_names=_selects_by_name(task.test_command),
                    classes=_classes_of(base).with_files(workdir, [*kept, *hidden]),
                )  # fmt: skip
                run = run_pytest(
                    workdir, task.test_command, bwrap=self.bwrap, config=self.sandbox,
                    timeout_s=self.config.timeout_seconds,
                    test_paths=(planting.module, *present), options_from=base,
                    python_environment=environment, workspace_bytes=self.config.workspace_bytes,
                )  # fmt: skip
            except UnsupportedTestCommand as error:
                return Score(0.0, components, error=str(error))
        components["test_seconds"] = run.seconds
        components["canaries"] = float(len(planting.canaries))
        outcomes = planting.outcomes(run)
        fail_to_pass = {t: outcomes.get(t) == "passed" for t in task.fail_to_pass}
        pass_to_pass = {t: outcomes.get(t) == "passed" for t in task.pass_to_pass}
        components |= {
            "fail_to_pass_passed": float(sum(fail_to_pass.values())),
            "fail_to_pass_total": float(len(fail_to_pass)),
            "pass_to_pass_passed": float(sum(pass_to_pass.values())),
            "pass_to_pass_total": float(len(pass_to_pass)),
            "timed_out": float(run.timed_out),
        }
        if run.timed_out:
            return Score(0.0, components, fail_to_pass, pass_to_pass, timed_out=True)
        # A suite that could not run (a test module the patch stopped importing) never ran
        # the canaries either: that excuses canaries with no outcome, and nothing else. A
        # canary reported otherwise than planted is still a forgery, whatever the run says
        # of itself, and `suite_error` is only ever set for a run that reported its end.
        broken = run.suite_error
        if problem := planting.violation(run):
            components["tampered"] = 1.0
            return Score(0.0, components, fail_to_pass, pass_to_pass, error=f"tampered: {problem}")
        if broken:
            error = f"the suite could not run: {broken}"
            return Score(0.0, components, fail_to_pass, pass_to_pass, error=error)
        outcome = Outcome(fail_to_pass, pass_to_pass, changed)
        reward = REWARD_FUNCTIONS[self.config.reward_function](outcome)
        reward -= self.config.test_edit_penalty * components["touched_tests"]
        return Score(reward, components, fail_to_pass, pass_to_pass)

    @staticmethod
    def _inspect(base: Path, workdir: Path, paths: list[str]):
        """The changed Python sources (for style rewards) and what they newly do to the
        test runner."""
        changed: dict[str, tuple[str, frozenset[int]]] = {}
        findings = []
        for path in paths:
            after = regular_file(workdir, path)
            if after is None:
                continue
            before = regular_file(base, path)
            findings += runner_access(path, before, after)
            if path.endswith(".py"):
                changed[path] = (decode(after), added_lines(before, after))
        return changed, findings

    @staticmethod
    def _install_hidden_tests(base: Path, workdir: Path, task: Task) -> None:
        """Put back every file the test patch touches as the base has it (discarding the
        agent's edits to them), then apply the test patch."""
        for path in patched_files(task.test_patch):
            restore(base, workdir, path)
        apply_patch(workdir, task.test_patch)


def reclaim_leftovers(config: RewardConfig) -> Reclaimed:
    """What graders that were killed left: their scratch trees under `config.cache_dir` and
    the cgroups of their test runs (with every process still in them). What a live grader
    owns, in this process or another, stays."""
    assert config.cache_dir is not None
    found = reclaim_owned_dirs(config.cache_dir / SCRATCH_DIR)
    return found + reclaim_cgroups(GRADING_CGROUPS)


@functools.lru_cache(maxsize=64)
def _classes_of(base: Path) -> ClassIndex:
    """The classes a task's base repository defines: read once per process (a base never
    changes once built), each grading reading again only the files it changed."""
    return ClassIndex.of_tree(base)


def _tree_bytes(root: Path) -> int:
    return sum(
        os.lstat(os.path.join(directory, name)).st_size
        for directory, _dirs, names in os.walk(root)
        for name in names
    )


def _selects_by_name(command: str) -> bool:
    """Whether the task's pytest command picks tests by name (`-k`, `--deselect`, a node id
    `file::test`): its tests keep their names then."""
    try:
        args = command_args(command)
    except UnsupportedTestCommand:
        return False
    return any(a.startswith(("-k", "--deselect")) or "::" in a for a in args)
