"""A balanced interval tree with explicit half-open or closed interval semantics."""

from .interval import Bounds, Interval
from .tree import IntervalTree

__all__ = ["Bounds", "Interval", "IntervalTree"]
