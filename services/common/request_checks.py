"""Bounds every service applies to a request's strings and numbers before using them.

A caller on the network, or a policy whose text ends up in a request, chooses these values:
an id or a path with a NUL byte fails deep inside the OS with an error nobody mapped, a
10 KB path bloats logs and metrics, a NaN time-to-live never expires. Each check raises
`InvalidFieldError` naming the field; servicers turn it into INVALID_ARGUMENT.
"""

from __future__ import annotations

import math

MAX_ID_BYTES = 4096
"""Ids (sessions, tasks, runs, requests, workspaces) and tool call names."""
MAX_PATH_BYTES = 4096
"""Paths: PATH_MAX on Linux."""
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class InvalidFieldError(ValueError):
    """A request field outside what the service accepts; the message names the field."""


def check_text(
    value: str, field: str, *, max_bytes: int = MAX_ID_BYTES, required: bool = False
) -> str:
    """`value` unless it is required and empty, holds a NUL byte, is not encodable as
    UTF-8 (a lone surrogate from JSON), or is longer than `max_bytes` in UTF-8."""
    if required and not value:
        raise InvalidFieldError(f"{field} is required")
    if "\0" in value:
        raise InvalidFieldError(f"{field} contains a NUL character")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidFieldError(f"{field} is not valid UTF-8") from None
    if size > max_bytes:
        raise InvalidFieldError(f"{field} is {size} bytes long; the limit is {max_bytes}")
    return value


def check_path(value: str, field: str, *, required: bool = False) -> str:
    return check_text(value, field, max_bytes=MAX_PATH_BYTES, required=required)


def check_finite(
    value: float, field: str, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """`value` if it is a finite number within [minimum, maximum]."""
    if not math.isfinite(value):
        raise InvalidFieldError(f"{field} must be a finite number, not {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidFieldError(f"{field} must be ≥ {minimum}, not {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidFieldError(f"{field} must be ≤ {maximum}, not {value!r}")
    return value


def check_count(items, field: str, maximum: int) -> None:
    if len(items) > maximum:
        raise InvalidFieldError(f"{field} has {len(items)} entries; the limit is {maximum}")
