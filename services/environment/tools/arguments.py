"""Reading tool arguments, which arrive as the raw strings the policy wrote.

Each parser raises `ToolArgumentError` with a message that names the parameter and the accepted
values, so a malformed call comes back to the agent as something it can correct.
"""

from __future__ import annotations

import re

from etude.environment.tools.base import ToolArgumentError

_TRUE = frozenset({"true", "1", "yes", "y", "on"})
_FALSE = frozenset({"false", "0", "no", "n", "off", ""})


def parse_int(
    name: str,
    value: str | int | None,
    *,
    default: int | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int | None:
    """An integer within [minimum, maximum]; `default` when the argument was not given."""
    if value is None:
        return default
    text = str(value).strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise ToolArgumentError(f"{name} must be a whole number, got {text[:40]!r}")
    number = int(text)
    _check_range(name, number, minimum, maximum)
    return number


def parse_number(
    name: str, value: str | float | None, *, default: float, minimum: float, maximum: float
) -> float:
    """A number of seconds or similar, e.g. `60` or `2.5`."""
    if value is None:
        return default
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        raise ToolArgumentError(f"{name} must be a number, got {text[:40]!r}") from None
    if number != number:  # NaN compares unequal to itself and slips through range checks
        raise ToolArgumentError(f"{name} must be a number, got {text[:40]!r}")
    _check_range(name, number, minimum, maximum)
    return number


def parse_bool(name: str, value: str | bool | None, *, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ToolArgumentError(f"{name} must be true or false, got {text[:40]!r}")


def parse_list(value: str | None) -> list[str]:
    """Items separated by commas or newlines, blanks dropped (`"src, tests"` → 2 items)."""
    if value is None:
        return []
    return [item.strip() for item in re.split(r"[,\n]", value) if item.strip()]


def require_text(name: str, value: str | None) -> str:
    if value is None or not str(value).strip():
        raise ToolArgumentError(f"{name} must not be empty")
    return str(value)


def _check_range(name: str, number: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and number < minimum:
        raise ToolArgumentError(f"{name} must be at least {minimum}, got {number:g}")
    if maximum is not None and number > maximum:
        raise ToolArgumentError(f"{name} must be at most {maximum}, got {number:g}")
