"""Settings of the reward service (`ETUDE_REWARD__*`; the `sim` backend's `ETUDE_SIM__*`, see
`etude.sim.config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from etude.common.settings import Section
from etude.sandbox.config import SandboxSettings
from etude.sim.config import SimConfig
from etude.tasks.materialize import BUNDLED_TASK_FILES, PROJECTS_DIR


class RewardConfig(Section):
    backend: Literal["grader", "sim"] = "grader"
    """`grader`: the task's hidden tests run on the patch in a sandbox (the settings below).
    `sim`: a score after simulated time, solved at the scenario's solve rate
    (etude.reward.sim; `ETUDE_SIM__*`)."""
    tasks_files: tuple[Path, ...] = BUNDLED_TASK_FILES
    """JSONL files of the tasks graded when a request names no run (a smoke check, a gold
    patch graded by hand). A run's rollouts name their run, and their tasks come from the
    task set registered with it (etude.tasks.taskset), whatever this says."""
    projects_dir: Path = PROJECTS_DIR
    """Where the projects of `etude-mini/<name>` tasks live."""
    cache_dir: Path | None = None
    """Where task repositories are built; unset: `<stack run dir>/tasks`."""
    checkouts_dir: Path | None = None
    """Repository checkouts for SWE-bench-style tasks."""
    environment_address: str | None = None
    """`host:port` of the environment service, where sessions' diffs come from; unset:
    `ETUDE_SERVICES__ENVIRONMENT`."""
    timeout_seconds: float = Field(default=120.0, gt=0)
    """How long the hidden tests may run; past it the score is 0."""
    reward_function: str = "binary"
    """`binary`, `partial` (share of tests passing) or `style` (binary minus ruff findings
    on changed lines)."""
    test_edit_penalty: float = Field(default=0.0, ge=0)
    """Subtracted when the patch touches test files (their edits are discarded either way)."""
    max_patch_expanded_bytes: int = Field(default=64 * 1024**2, ge=1024**2)
    """What applying a patch may write (binary data inflated, copies of files included),
    checked before anything is written; a larger patch scores 0 with the reason."""
    workspace_bytes: int = Field(default=1024**3, ge=16 * 1024**2)
    """The hidden tests run on a copy of the patched repository in the sandbox's memory, of
    this size: what the code under test writes stays there, within it (and within the
    grading cgroup's memory). A repository that does not fit scores 0 saying so."""
    canary_odds: int = Field(default=1000, ge=2)
    """Canaries are copies of the hidden tests with the expected value changed
    (etude.reward.canaries): a forger that guesses which copy of each test is the real one
    succeeds at most once in this many gradings, where the suite has enough tests."""
    canary_copies: int = Field(default=15, ge=1, le=32)
    """Changed copies of one hidden test at most (each adds a run of that test)."""
    canary_cases: int = Field(default=40, ge=1)
    """Test cases all copies together add at most (a copy of a parametrized test adds one
    a row): the bound on what canaries add to a grading's time; the FAIL_TO_PASS tests'
    copies come first."""


class RewardSettings(SandboxSettings):
    """The reward section, and the sandbox section (`ETUDE_SANDBOX__*`) the environment
    reads too: the hidden tests run with the sessions' binds and backend, and grading's
    limits (`SandboxConfig.for_grading()`)."""

    reward: RewardConfig = RewardConfig()
    sim: SimConfig = SimConfig()

    def resolved(self) -> RewardConfig:
        """The reward section with the defaults that depend on other sections filled."""
        return self.reward.model_copy(
            update={
                "cache_dir": self.reward.cache_dir or self.stack.run_dir / "tasks",
                "environment_address": (
                    self.reward.environment_address or self.services.environment
                ),
            }
        )
