"""semverkit: Semantic Versioning 2.0.0 versions and npm-style ranges."""

from .ranges import Comparator, InvalidRange, Range, max_satisfying, min_satisfying, satisfies
from .version import InvalidVersion, Version, compare, is_valid, parse

__all__ = [
    "Comparator",
    "InvalidRange",
    "InvalidVersion",
    "Range",
    "Version",
    "compare",
    "is_valid",
    "max_satisfying",
    "min_satisfying",
    "parse",
    "satisfies",
]
