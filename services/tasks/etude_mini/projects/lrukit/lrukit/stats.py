"""Hit/miss bookkeeping shared by every cache."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CacheStats:
    """Counters for one cache.

    ``peek`` and ``in`` never touch these counters, so inspecting a cache does not distort
    the numbers that describe how well it serves real lookups.
    """

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    expirations: int = 0

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float:
        """Fraction of lookups that were hits; 0.0 before the first lookup."""
        if self.lookups == 0:
            return 0.0
        return self.hits / self.lookups

    def reset(self) -> None:
        self.hits = self.misses = self.evictions = self.expirations = 0

    def __str__(self) -> str:
        return (
            f"hits={self.hits} misses={self.misses} hit_rate={self.hit_rate:.1%} "
            f"evictions={self.evictions} expirations={self.expirations}"
        )
