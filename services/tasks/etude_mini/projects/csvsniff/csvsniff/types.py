"""Per-value classification and per-column type inference."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date

NULL_TOKENS = frozenset({"", "na", "n/a", "null", "none"})
TRUE_TOKENS = frozenset({"true", "yes"})
FALSE_TOKENS = frozenset({"false", "no"})

# Leading zeros ("007", "0123") mark identifiers such as ZIP codes, not numbers: converting
# them would lose the zeros, so such values stay strings.
_INT = re.compile(r"[+-]?(?:0|[1-9]\d*)")
_FLOAT = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")

# Most specific first; a column gets the first type that enough of its values support.
TYPE_ORDER = ("bool", "int", "float", "date")
_COMPATIBLE = {"bool": {"bool"}, "int": {"int"}, "float": {"int", "float"}, "date": {"date"}}


def fits(kind: str, type_name: str) -> bool:
    """Whether a value of ``kind`` (see :func:`classify`) can be read as ``type_name``."""
    if type_name == "str":
        return True
    return kind in _COMPATIBLE.get(type_name, ())


def classify(value: str) -> str:
    """The most specific kind of one raw value: null, bool, int, float, date or str."""
    text = value.strip()
    lowered = text.lower()
    if lowered in NULL_TOKENS:
        return "null"
    if lowered in TRUE_TOKENS or lowered in FALSE_TOKENS:
        return "bool"
    if _INT.fullmatch(text):
        return "int"
    if _FLOAT.fullmatch(text) and not _has_leading_zero(text):
        return "float"
    match = _DATE.fullmatch(text)
    if match:
        try:
            date(int(match[1]), int(match[2]), int(match[3]))
        except ValueError:
            return "str"  # shaped like a date but not a real one (2023-02-29)
        return "date"
    return "str"


def _has_leading_zero(text: str) -> bool:
    digits = text.lstrip("+-")
    return len(digits) > 1 and digits[0] == "0" and digits[1].isdigit()


@dataclass(frozen=True)
class ColumnType:
    """Inferred type of a column.

    ``confidence`` is the share of non-null values that support ``name`` (for ``str``: the
    share that fit no narrower type); it is 0.0 for a column with no values at all.
    """

    name: str
    confidence: float
    nulls: int = 0

    @property
    def nullable(self) -> bool:
        return self.nulls > 0


def infer_type(values: Iterable[str], min_share: float = 0.9) -> ColumnType:
    """Pick the most specific type supported by at least ``min_share`` of non-null values."""
    if not 0.0 < min_share <= 1.0:
        raise ValueError(f"min_share must be in (0, 1], got {min_share}")
    kinds = [classify(value) for value in values]
    nulls = kinds.count("null")
    present = [kind for kind in kinds if kind != "null"]
    if not present:
        return ColumnType("str", 0.0, nulls)
    for name in TYPE_ORDER:
        share = sum(fits(kind, name) for kind in present) / len(present)
        if share >= min_share:
            return ColumnType(name, round(share, 4), nulls)
    return ColumnType("str", round(present.count("str") / len(present), 4), nulls)


def convert(value: str, type_name: str) -> object:
    """Convert a raw value to the Python type named by inference; nulls become ``None``.

    Values that do not fit (the minority a confidence below 1.0 allows) also become
    ``None`` rather than raising, so a typed column never mixes types.
    """
    kind = classify(value)
    if kind == "null":
        return None
    if type_name == "str":
        return value
    if type_name not in _COMPATIBLE:
        raise ValueError(f"unknown type {type_name!r}")
    if not fits(kind, type_name):
        return None
    text = value.strip()
    if type_name == "bool":
        return text.lower() in TRUE_TOKENS
    if type_name == "int":
        return int(text)
    if type_name == "float":
        return float(text)
    return date.fromisoformat(text)
