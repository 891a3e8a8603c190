"""Confidence intervals of pass rates: held-out pass@1 (etude.rollout.evaluation) and a
training step's pass rate on the reward curve (etude.trainer.report)."""

from __future__ import annotations

import math

Z_95 = 1.959963984540054


def wilson_interval(passed: int, episodes: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (sound at 0 and at n, unlike the
    normal approximation); (0, 1) when nothing was observed."""
    if episodes == 0:
        return 0.0, 1.0
    p = passed / episodes
    denominator = 1 + z * z / episodes
    centre = (p + z * z / (2 * episodes)) / denominator
    spread = z * math.sqrt(p * (1 - p) / episodes + z * z / (4 * episodes**2)) / denominator
    return max(0.0, centre - spread), min(1.0, centre + spread)
