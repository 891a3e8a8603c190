"""Strict parsing of ISO 8601 and common human date, time, datetime and duration text."""

from .calendar_rules import (
    date_from_iso_week,
    date_from_ordinal,
    days_in_month,
    format_iso_week,
    is_leap_year,
    iso_week_of,
    iso_weeks_in_year,
)
from .durations import Duration, format_duration, parse_duration
from .errors import DateParseError, DateRangeError, DurationError
from .parsing import parse, parse_date, parse_datetime, parse_offset, parse_time

__all__ = [
    "DateParseError",
    "DateRangeError",
    "Duration",
    "DurationError",
    "date_from_iso_week",
    "date_from_ordinal",
    "days_in_month",
    "format_duration",
    "format_iso_week",
    "is_leap_year",
    "iso_week_of",
    "iso_weeks_in_year",
    "parse",
    "parse_date",
    "parse_datetime",
    "parse_duration",
    "parse_offset",
    "parse_time",
]
