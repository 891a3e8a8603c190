"""Parsers for dates, times and datetimes.

Every parser is strict: the whole input (after trimming outer whitespace) must match one
supported form. Recognised syntax with impossible values raises ``DateRangeError``; text
that matches no form raises ``DateParseError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo

from .calendar_rules import (
    check_time,
    date_from_iso_week,
    date_from_ordinal,
    make_date,
)
from .errors import DateParseError, DateRangeError

_MONTH_NAMES = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
MONTHS: dict[str, int] = {}
for _number, _name in enumerate(_MONTH_NAMES, start=1):
    MONTHS[_name] = _number
    MONTHS[_name[:3]] = _number
MONTHS["sept"] = 9

_DateBuilder = Callable[[re.Match[str]], date]


def _calendar(m: re.Match[str]) -> date:
    return make_date(int(m["y"]), int(m["m"]), int(m["d"]))


def _year_month(m: re.Match[str]) -> date:
    # Reduced precision "YYYY-MM" denotes the whole month; we anchor it on the first day.
    return make_date(int(m["y"]), int(m["m"]), 1)


def _week(m: re.Match[str]) -> date:
    weekday = int(m["d"]) if m["d"] else 1
    return date_from_iso_week(int(m["y"]), int(m["w"]), weekday)


def _ordinal(m: re.Match[str]) -> date:
    return date_from_ordinal(int(m["y"]), int(m["o"]))


def ordinal_suffix(day: int) -> str:
    """English ordinal suffix: 1st, 2nd, 3rd, 4th, 11th-13th, 21st, ..."""
    if 11 <= day % 100 <= 13:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _human(m: re.Match[str]) -> date:
    name = m["mon"].lower()
    if name not in MONTHS:
        raise DateParseError(f"unknown month name {m['mon']!r}")
    day = int(m["d"])
    suffix = m["suffix"]
    if suffix is not None and suffix.lower() != ordinal_suffix(day):
        raise DateParseError(f"wrong ordinal suffix {day}{suffix}, expected {ordinal_suffix(day)}")
    return make_date(int(m["y"]), MONTHS[name], day)


_HUMAN_DAY = r"(?P<d>\d{1,2})(?P<suffix>st|nd|rd|th)?"
_HUMAN_MONTH = r"(?P<mon>[A-Za-z]+)\.?"

_DATE_FORMS: list[tuple[re.Pattern[str], _DateBuilder]] = [
    (re.compile(r"(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})"), _calendar),
    (re.compile(r"(?P<y>\d{4})(?P<m>\d{2})(?P<d>\d{2})"), _calendar),
    (re.compile(r"(?P<y>\d{4})-(?P<m>\d{2})"), _year_month),
    (re.compile(r"(?P<y>\d{4})-W(?P<w>\d{2})(?:-(?P<d>\d))?"), _week),
    (re.compile(r"(?P<y>\d{4})W(?P<w>\d{2})(?P<d>\d)?"), _week),
    (re.compile(r"(?P<y>\d{4})-(?P<o>\d{3})"), _ordinal),
    (re.compile(r"(?P<y>\d{4})(?P<o>\d{3})"), _ordinal),
    (re.compile(r"(?P<y>\d{4})/(?P<m>\d{1,2})/(?P<d>\d{1,2})"), _calendar),
    (re.compile(_HUMAN_DAY + r"\s+" + _HUMAN_MONTH + r",?\s+(?P<y>\d{4})", re.I), _human),
    (re.compile(_HUMAN_MONTH + r"\s+" + _HUMAN_DAY + r",?\s+(?P<y>\d{4})", re.I), _human),
]

_OFFSET = r"(?P<tz>[Zz]|[+-]\d{2}(?::?\d{2})?)?"
# The back-reference keeps separators consistent: "14:30:15" and "143015", never "14:3015".
_TIME_CORE = r"(?P<h>\d{2})(?:(?P<sep>:?)(?P<m>\d{2})(?:(?P=sep)(?P<s>\d{2})(?:[.,](?P<f>\d+))?)?)?"
_TIME = re.compile(r"T?" + _TIME_CORE + _OFFSET)
# A space may only separate date and time when the time is in extended (colon) form;
# otherwise "3 Mar 2024" would split into "3 Mar" and a time of 20:24.
_DATETIME = re.compile(r"(?P<date>.+?)(?:T(?P<after_t>\d.*)|\s+(?P<after_space>\d{2}:.*))")


def _clean(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"expected str, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise DateParseError("empty input")
    return stripped


def parse_date(text: str) -> date:
    """Parse a calendar, week, ordinal or human-style date into a ``date``."""
    cleaned = _clean(text)
    for pattern, build in _DATE_FORMS:
        match = pattern.fullmatch(cleaned)
        if match:
            return build(match)
    raise DateParseError(f"unrecognised date {cleaned!r}")


def parse_offset(token: str | None) -> tzinfo | None:
    """``Z``, ``+hh``, ``+hhmm`` or ``+hh:mm`` to a fixed ``timezone``; ``None`` stays naive."""
    if token is None:
        return None
    if token in ("Z", "z"):
        return UTC
    sign = -1 if token[0] == "-" else 1
    digits = token[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    if hours > 23:
        raise DateRangeError(f"offset hour {hours} out of range 0..23")
    if minutes > 59:
        raise DateRangeError(f"offset minute {minutes} out of range 0..59")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def _time_parts(text: str) -> tuple[int, int, int, int, tzinfo | None]:
    match = _TIME.fullmatch(text)
    if not match:
        raise DateParseError(f"unrecognised time {text!r}")
    hour = int(match["h"])
    minute = int(match["m"] or 0)
    second = int(match["s"] or 0)
    # Extra fractional digits beyond microseconds are truncated, never rounded up, so a
    # value can never spill into the next second.
    microsecond = int((match["f"] or "").ljust(6, "0")[:6])
    check_time(hour, minute, second, microsecond)
    return hour, minute, second, microsecond, parse_offset(match["tz"])


def parse_time(text: str) -> time:
    """Parse ``hh[:mm[:ss[.ffffff]]]`` (or basic ``hhmmss``) with an optional offset.

    ``24:00`` is rejected here because a bare ``time`` cannot represent the end of a day;
    :func:`parse_datetime` accepts it and rolls over to the next day.
    """
    hour, minute, second, microsecond, tz = _time_parts(_clean(text))
    if hour == 24:
        raise DateRangeError("24:00 needs a date; use parse_datetime")
    return time(hour, minute, second, microsecond, tzinfo=tz)


def _split_datetime(text: str) -> tuple[str, str] | None:
    match = _DATETIME.fullmatch(text)
    if not match:
        return None
    return match["date"], match["after_t"] or match["after_space"]


def parse_datetime(text: str) -> datetime:
    """Parse ``<date>T<time>`` (or ``<date> <hh:mm...>``) into a ``datetime``."""
    cleaned = _clean(text)
    parts = _split_datetime(cleaned)
    if parts is None:
        raise DateParseError(f"unrecognised datetime {cleaned!r}")
    day = parse_date(parts[0])
    hour, minute, second, microsecond, tz = _time_parts(parts[1])
    if hour == 24:
        try:
            day += timedelta(days=1)
        except OverflowError:
            raise DateRangeError("24:00 on the last representable day overflows") from None
        hour = 0
    return datetime.combine(day, time(hour, minute, second, microsecond, tzinfo=tz))


def parse(text: str) -> date | time | datetime:
    """Parse whichever of date, datetime or time ``text`` holds.

    A lone time must be unambiguous (contain a colon or a leading ``T``) so that inputs
    such as ``2024`` are never mistaken for 20:24.
    """
    cleaned = _clean(text)
    try:
        return parse_date(cleaned)
    except DateRangeError:
        raise
    except DateParseError:
        pass
    if _split_datetime(cleaned) is not None:
        return parse_datetime(cleaned)
    if ":" in cleaned or cleaned.startswith("T"):
        return parse_time(cleaned)
    raise DateParseError(f"unrecognised date, time or datetime {cleaned!r}")
