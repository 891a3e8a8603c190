"""Settings of the reward service (`ETUDE_REWARD__*`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from etude.common.settings import EtudeSettings, Section
from etude.tasks.materialize import TASKS_FILE


class RewardConfig(Section):
    tasks_files: tuple[Path, ...] = (TASKS_FILE,)
    """JSONL files of the tasks this service grades (the bundled etude-mini set by default)."""
    cache_dir: Path | None = None
    """Where task repositories are built; unset: `<stack run dir>/tasks`."""
    checkouts_dir: Path | None = None
    """Repository checkouts for SWE-bench-style tasks."""
    environment_address: str | None = None
    """`host:port` of the environment service, where sessions' diffs come from."""
    timeout_seconds: float = Field(default=120.0, gt=0)
    """How long the hidden tests may run; past it the score is 0."""
    reward_function: str = "binary"
    """`binary`, `partial` (share of tests passing) or `style` (binary minus ruff findings
    on changed lines)."""
    test_edit_penalty: float = Field(default=0.0, ge=0)
    """Subtracted when the patch touches test files (their edits are discarded either way)."""


class RewardSettings(EtudeSettings):
    reward: RewardConfig = RewardConfig()

    def resolved(self) -> RewardConfig:
        if self.reward.cache_dir is not None:
            return self.reward
        return self.reward.model_copy(update={"cache_dir": self.stack.run_dir / "tasks"})
