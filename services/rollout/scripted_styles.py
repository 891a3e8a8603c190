"""Ways of working the scripted solver can demonstrate, so SFT gives RL choices to select
between rather than one fixed habit.

A style is a handful of independent choices; which ones matter depends on the hint tier
(at tier 3 the function's source is in the instruction, so there is nothing to search for).
Variant 0 of every task is the tier's baseline; the other variants walk the tier's remaining
styles in an order shuffled per (task, tier), so a few variants per task still cover every
style across the task set.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass, replace
from typing import Literal

SearchTool = Literal["grep", "codebase_search"]
SOURCE_TIER = 3
"""The tier whose instruction holds the function's source with line numbers."""


@dataclass(frozen=True, slots=True)
class Style:
    parallel: bool
    """Batch independent calls in one turn (two searches at once, the edit with its check),
    or make one call per turn."""
    first_search: SearchTool
    """The tool of the first search: `codebase_search` (by meaning) or `grep` (exact text)."""
    read_first: bool
    """Read the code with read_file before editing it; False only where the instruction
    already shows it with line numbers (tier 3), which an edit can quote directly."""
    smoke: bool
    """Import the changed module before submitting (the hidden tests are not there)."""

    @property
    def label(self) -> str:
        return "-".join((
            "parallel" if self.parallel else "sequential",
            self.first_search,
            "read" if self.read_first else "blind",
            "smoke" if self.smoke else "nosmoke",
        ))  # fmt: skip


def tier_styles(tier: int) -> list[Style]:
    """The distinct styles of a tier, its baseline first."""
    if tier == SOURCE_TIER:
        # The short episode: edit from the source shown, then submit.
        baseline = Style(parallel=False, first_search="grep", read_first=False, smoke=False)
        others = [
            replace(baseline, read_first=read, smoke=smoke, parallel=parallel)
            for read, smoke, parallel in itertools.product((False, True), repeat=3)
            # Batching changes nothing when there is neither a read nor a check to batch.
            if (read or smoke or not parallel)
        ]
    else:
        baseline = Style(parallel=True, first_search="grep", read_first=True, smoke=True)
        others = [
            replace(baseline, parallel=parallel, first_search=search, smoke=smoke)
            for parallel, search, smoke in itertools.product(
                (True, False), ("grep", "codebase_search"), (True, False)
            )
        ]
    return [baseline, *(style for style in others if style != baseline)]


def style_for(task_id: str, tier: int, variant: int) -> Style:
    """The style of one demonstration: the tier's baseline for variant 0, then the other
    styles in an order fixed by (task, tier)."""
    if variant < 0:
        raise ValueError(f"variant must be ≥ 0, got {variant}")
    baseline, *others = tier_styles(tier)
    if variant == 0:
        return baseline
    seed = hashlib.sha256(f"{task_id}\0{tier}".encode()).digest()
    random.Random(seed).shuffle(others)
    return others[(variant - 1) % len(others)]
