"""ISO 8601 durations (``PnYnMnDTnHnMnS`` and ``PnW``) in both directions.

Years and months have no fixed length, so only durations without them become ``timedelta``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from .errors import DurationError

_DURATION = re.compile(
    r"(?P<sign>[-+])?P(?!$)"
    r"(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?"
    r"(?:(?P<seconds>\d+)(?:[.,](?P<fraction>\d+))?S)?)?"
)
_MAX_FRACTION_DIGITS = 6


@dataclass(frozen=True)
class Duration:
    """A parsed duration; all fields are non-negative and ``negative`` carries the sign."""

    years: int = 0
    months: int = 0
    days: int = 0
    hours: int = 0
    minutes: int = 0
    seconds: int = 0
    microseconds: int = 0
    negative: bool = False

    def __post_init__(self) -> None:
        for name in ("years", "months", "days", "hours", "minutes", "seconds", "microseconds"):
            if getattr(self, name) < 0:
                raise DurationError(f"{name} must not be negative; use negative=True")
        if self.microseconds >= 1_000_000:
            raise DurationError("microseconds must be below 1000000")

    def to_timedelta(self) -> timedelta:
        if self.years or self.months:
            raise DurationError("years and months have no fixed length; cannot convert")
        delta = timedelta(
            days=self.days,
            hours=self.hours,
            minutes=self.minutes,
            seconds=self.seconds,
            microseconds=self.microseconds,
        )
        return -delta if self.negative else delta


def parse_duration(text: str) -> Duration:
    """Parse an ISO 8601 duration.

    Weeks may not be combined with other units (ISO 8601:2004) and are stored as days.
    Only the seconds field may carry a fraction, to at most microsecond precision. A
    leading ``-`` is accepted as the common extension for negative durations.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected str, got {type(text).__name__}")
    cleaned = text.strip()
    match = _DURATION.fullmatch(cleaned)
    if not match:
        raise DurationError(f"invalid ISO 8601 duration {cleaned!r}")
    fields = {
        k: int(v) for k, v in match.groupdict().items() if v and k not in ("sign", "fraction")
    }
    weeks = fields.pop("weeks", None)
    if weeks is not None:
        if fields:
            raise DurationError("weeks cannot be combined with other units")
        fields["days"] = weeks * 7
    fraction = match["fraction"]
    if fraction is not None:
        if len(fraction) > _MAX_FRACTION_DIGITS:
            raise DurationError("at most 6 fractional second digits are supported")
        fields["microseconds"] = int(fraction.ljust(_MAX_FRACTION_DIGITS, "0"))
    return Duration(**fields, negative=match["sign"] == "-")


def _seconds_text(seconds: int, microseconds: int) -> str:
    if microseconds == 0:
        return str(seconds)
    return f"{seconds}.{microseconds:06d}".rstrip("0")


def format_duration(value: Duration | timedelta) -> str:
    """Render the shortest canonical ISO 8601 form; zero is ``PT0S``.

    A ``timedelta`` is normalised (90 seconds become ``PT1M30S``); a ``Duration`` keeps its
    fields as given, so ``format_duration(parse_duration(s))`` returns ``s`` for canonical
    input.
    """
    if isinstance(value, timedelta):
        value = _from_timedelta(value)
    elif not isinstance(value, Duration):
        raise TypeError(f"expected Duration or timedelta, got {type(value).__name__}")
    date_part = "".join(
        f"{amount}{unit}"
        for amount, unit in ((value.years, "Y"), (value.months, "M"), (value.days, "D"))
        if amount
    )
    time_part = "".join(
        f"{amount}{unit}" for amount, unit in ((value.hours, "H"), (value.minutes, "M")) if amount
    )
    if value.seconds or value.microseconds:
        time_part += _seconds_text(value.seconds, value.microseconds) + "S"
    if not date_part and not time_part:
        return "PT0S"
    sign = "-" if value.negative else ""
    return f"{sign}P{date_part}" + (f"T{time_part}" if time_part else "")


def _from_timedelta(delta: timedelta) -> Duration:
    negative = delta < timedelta(0)
    total = abs(delta)
    hours, rest = divmod(total.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return Duration(
        days=total.days,
        hours=hours,
        minutes=minutes,
        seconds=seconds,
        microseconds=total.microseconds,
        negative=negative,
    )
