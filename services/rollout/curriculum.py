"""A hint curriculum: start where the policy can solve tasks (a high hint tier) and take
the hints away one tier at a time (3 → 2 → 1 → 0, down to `final_tier`) once the training
pass rate shows it no longer needs them.

After each RL step the run calls `update` with that step's pass rate; when the mean over the
last `window` steps reaches `promote_at`, the tier drops by one and the window starts over
(the rates measured with more hints say nothing about the new tier). The orchestrator then
schedules new rollouts at `tier`.
"""

from __future__ import annotations

import math

from etude.common.run_config import CurriculumConfig
from etude.tasks.hints import HINT_TIERS


class Curriculum:
    def __init__(self, config: CurriculumConfig, start_tier: int) -> None:
        if start_tier not in HINT_TIERS:
            raise ValueError(f"start tier {start_tier} is not one of {HINT_TIERS}")
        self.config = config
        self.tier = start_tier
        # Pass rates of the steps since the last move, oldest first (at most `window`).
        self.recent: list[float] = []

    def update(self, pass_rate: float) -> int:
        """Record one step's training pass rate; the tier to schedule at from now on."""
        if not (math.isfinite(pass_rate) and 0.0 <= pass_rate <= 1.0):
            raise ValueError(f"a pass rate is between 0 and 1, got {pass_rate}")
        config = self.config
        if not config.enabled or self.tier <= config.final_tier:
            return self.tier
        self.recent = [*self.recent, pass_rate][-config.window :]
        if len(self.recent) == config.window and (
            sum(self.recent) / config.window >= config.promote_at
        ):
            self.tier -= 1
            self.recent = []
        return self.tier

    def snapshot(self) -> dict:
        return {"tier": self.tier, "recent": list(self.recent)}

    def restore(self, snapshot: dict) -> None:
        tier, recent = snapshot["tier"], [float(r) for r in snapshot["recent"]]
        if tier not in HINT_TIERS:
            raise ValueError(f"curriculum snapshot has tier {tier}, not one of {HINT_TIERS}")
        self.tier, self.recent = tier, recent[-self.config.window :]
