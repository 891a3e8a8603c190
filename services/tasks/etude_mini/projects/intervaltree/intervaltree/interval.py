"""Interval values and the two supported endpoint conventions."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Bounds(Enum):
    """Which endpoints belong to an interval.

    ``HALF_OPEN`` (``[start, end)``) suits time ranges and indices: consecutive ranges meet
    without overlapping and an interval with ``start == end`` is empty. ``CLOSED``
    (``[start, end]``) includes both ends, so ``[3, 3]`` is a valid single point.
    """

    HALF_OPEN = "[)"
    CLOSED = "[]"

    @classmethod
    def coerce(cls, value: Bounds | str) -> Bounds:
        if isinstance(value, Bounds):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"bounds must be '[)' or '[]', got {value!r}") from None

    def reaches(self, end: Any, point: Any) -> bool:
        """Whether an interval ending at ``end`` covers positions at or after ``point``."""
        if self is Bounds.CLOSED:
            return end >= point
        return end > point

    def overlaps(self, a: Interval, b: Interval) -> bool:
        return self.reaches(a.end, b.start) and self.reaches(b.end, a.start)

    def contains_point(self, interval: Interval, point: Any) -> bool:
        return interval.start <= point and self.reaches(interval.end, point)

    def check(self, start: Any, end: Any) -> None:
        """Reject ranges that are reversed, or empty under these bounds."""
        if end < start:
            raise ValueError(f"interval end {end!r} is before start {start!r}")
        if self is Bounds.HALF_OPEN and start == end:
            raise ValueError(f"empty interval [{start!r}, {end!r}) in a half-open tree")

    def render(self, start: Any, end: Any) -> str:
        return f"{self.value[0]}{start!r}, {end!r}{self.value[1]}"


@dataclass(frozen=True)
class Interval:
    """An immutable interval with an optional payload.

    Equality includes ``data``, so two intervals over the same range with different payloads
    can live in one tree side by side. Ordering in the tree uses ``(start, end)`` only.
    """

    start: Any
    end: Any
    data: Any = None

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"interval end {self.end!r} is before start {self.start!r}")

    @property
    def length(self) -> Any:
        return self.end - self.start

    @property
    def key(self) -> tuple[Any, Any]:
        return (self.start, self.end)

    def envelops(self, other: Interval) -> bool:
        """True when ``other`` lies entirely within this interval (same for both bounds)."""
        return self.start <= other.start and other.end <= self.end
