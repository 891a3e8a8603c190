"""Grading a patch: apply it to a fresh copy of the task's base repository (never the
agent's own workspace), restore and add the hidden tests, run them in a sandbox with a
timeout, and turn the per-test results into a reward and its components."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from etude.environment.config import EnvironmentConfig
from etude.environment.sandbox.bwrap import Bwrap
from etude.reward.config import RewardConfig
from etude.reward.functions import REWARD_FUNCTIONS, Outcome
from etude.tasks.materialize import materialize
from etude.tasks.repo import PatchError, apply_patch
from etude.tasks.task import Task
from etude.tasks.testrun import run_pytest

_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
_PLAIN_FILE = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)
_TEST_PATH = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")


@dataclass(frozen=True, slots=True)
class Score:
    reward: float
    components: dict[str, float] = field(default_factory=dict)
    fail_to_pass: dict[str, bool] = field(default_factory=dict)
    pass_to_pass: dict[str, bool] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""
    timed_out: bool = False

    @property
    def result(self) -> str:
        """A label for metrics: passed, failed, timeout or error."""
        if self.error:
            return "error"
        if self.timed_out:
            return "timeout"
        return "passed" if self.reward > 0 else "failed"


def patched_files(patch: str) -> list[str]:
    names = {b for _a, b in _DIFF_FILE.findall(patch)} or set(_PLAIN_FILE.findall(patch))
    return sorted(n for n in names if n != "/dev/null")


def _added_lines(patch: str) -> dict[str, frozenset[int]]:
    """Line numbers (in the new file) that the patch adds or changes, per file."""
    lines: dict[str, set[int]] = {}
    current, number = None, 0
    for line in patch.splitlines():
        if line.startswith("+++ "):
            current = line[4:].removeprefix("b/")
            lines.setdefault(current, set())
        elif line.startswith("@@"):
            number = int(re.search(r"\+(\d+)", line)[1])
        elif current and line.startswith("+"):
            lines[current].add(number)
            number += 1
        elif current and not line.startswith("-") and not line.startswith("\\"):
            number += 1
    return {path: frozenset(found) for path, found in lines.items()}


class Grader:
    def __init__(self, config: RewardConfig, bwrap: Bwrap | None) -> None:
        if config.reward_function not in REWARD_FUNCTIONS:
            known = ", ".join(sorted(REWARD_FUNCTIONS))
            raise ValueError(f"unknown reward function {config.reward_function!r}; known: {known}")
        assert config.cache_dir is not None
        self.config = config
        self.bwrap = bwrap
        self.sandbox = EnvironmentConfig()
        self._materialize_lock = asyncio.Lock()

    async def score(self, task: Task, patch: str) -> Score:
        started = time.perf_counter()
        async with self._materialize_lock:  # two graders must not build one repository
            base = await asyncio.to_thread(
                materialize, task, self.config.cache_dir, self.config.projects_dir,
                self.config.checkouts_dir,
            )  # fmt: skip
        score = await asyncio.to_thread(self._grade, task, patch, base)
        return Score(
            score.reward, score.components, score.fail_to_pass, score.pass_to_pass,
            time.perf_counter() - started, score.error, score.timed_out,
        )  # fmt: skip

    def _grade(self, task: Task, patch: str, base: Path) -> Score:
        touched = patched_files(patch)
        hidden = set(patched_files(task.test_patch))
        touches_tests = any(_TEST_PATH.search(p) or p in hidden for p in touched)
        components = {
            "patch_lines": float(sum(1 for line in patch.splitlines() if line[:1] in "+-")),
            "touched_tests": float(touches_tests),
        }
        with tempfile.TemporaryDirectory(prefix="etude-grade-") as scratch:
            workdir = Path(scratch) / "repo"
            shutil.copytree(base, workdir, symlinks=True)
            try:
                apply_patch(workdir, patch)
            except PatchError as error:
                return Score(0.0, components, error=f"the patch does not apply: {error}")
            changed = {
                path: ((workdir / path).read_text(errors="replace"), lines)
                for path, lines in _added_lines(patch).items()
                if path.endswith(".py") and (workdir / path).is_file()
            }
            try:
                self._install_hidden_tests(workdir, task)
            except PatchError as error:
                message = f"the task's hidden tests do not apply: {error}"
                return Score(0.0, components, error=message)
            run = run_pytest(
                workdir, task.test_command, bwrap=self.bwrap, config=self.sandbox,
                timeout_s=self.config.timeout_seconds,
            )  # fmt: skip
        components["test_seconds"] = run.seconds
        fail_to_pass = {t: run.passed(t) for t in task.fail_to_pass}
        pass_to_pass = {t: run.passed(t) for t in task.pass_to_pass}
        components |= {
            "fail_to_pass_passed": float(sum(fail_to_pass.values())),
            "fail_to_pass_total": float(len(fail_to_pass)),
            "pass_to_pass_passed": float(sum(pass_to_pass.values())),
            "pass_to_pass_total": float(len(pass_to_pass)),
            "timed_out": float(run.timed_out),
        }
        if run.timed_out:
            return Score(0.0, components, fail_to_pass, pass_to_pass, timed_out=True)
        outcome = Outcome(fail_to_pass, pass_to_pass, changed)
        reward = REWARD_FUNCTIONS[self.config.reward_function](outcome)
        reward -= self.config.test_edit_penalty * touches_tests
        return Score(reward, components, fail_to_pass, pass_to_pass)

    def _install_hidden_tests(self, workdir: Path, task: Task) -> None:
        """Put back every file the test patch touches as the base has it (discarding the
        agent's edits to them), then apply the test patch."""
        for path in patched_files(task.test_patch):
            restored = subprocess.run(
                ["git", "checkout", "-q", "HEAD", "--", path], cwd=workdir, capture_output=True
            )
            if restored.returncode != 0:  # not in the base: the test patch creates it
                (workdir / path).unlink(missing_ok=True)
        apply_patch(workdir, task.test_patch)
