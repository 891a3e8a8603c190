"""Calendar arithmetic and range validation for the proleptic Gregorian calendar.

These helpers are deliberately independent of the parsers: they take integers and either
return a ``date`` or raise ``DateRangeError`` with a message naming the offending field.
"""

from __future__ import annotations

from datetime import date, timedelta

from .errors import DateRangeError

MIN_YEAR = 1
MAX_YEAR = 9999


def is_leap_year(year: int) -> bool:
    """Gregorian rule: every fourth year, except centuries not divisible by 400."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def check_year(year: int) -> None:
    if not MIN_YEAR <= year <= MAX_YEAR:
        raise DateRangeError(f"year {year} out of range {MIN_YEAR}..{MAX_YEAR}")


def days_in_month(year: int, month: int) -> int:
    """Number of days in ``month`` of ``year``; February honours leap years."""
    if not 1 <= month <= 12:
        raise DateRangeError(f"month {month} out of range 1..12")
    if month == 2:
        return 29 if is_leap_year(year) else 28
    if month in (4, 6, 9, 11):
        return 30
    return 31


def days_in_year(year: int) -> int:
    return 366 if is_leap_year(year) else 365


def make_date(year: int, month: int, day: int) -> date:
    """Build a date, reporting the first out-of-range field in calendar order."""
    check_year(year)
    last = days_in_month(year, month)
    if not 1 <= day <= last:
        raise DateRangeError(f"day {day} out of range 1..{last} for {year:04d}-{month:02d}")
    return date(year, month, day)


def date_from_ordinal(year: int, day_of_year: int) -> date:
    """ISO ordinal date: ``day_of_year`` counts from 1 on 1 January."""
    check_year(year)
    last = days_in_year(year)
    if not 1 <= day_of_year <= last:
        raise DateRangeError(f"day of year {day_of_year} out of range 1..{last} for {year:04d}")
    return date(year, 1, 1) + timedelta(days=day_of_year - 1)


def _week_one_monday(year: int) -> date:
    # ISO week 1 is the week containing 4 January, i.e. the first week with a Thursday.
    jan4 = date(year, 1, 4)
    return jan4 - timedelta(days=jan4.isoweekday() - 1)


def iso_weeks_in_year(year: int) -> int:
    """52 or 53: a year has 53 ISO weeks when it starts on a Thursday, or on a Wednesday
    in a leap year (both cases give the year a 53rd Thursday)."""
    check_year(year)
    jan1 = date(year, 1, 1).isoweekday()
    if jan1 == 4 or (jan1 == 3 and is_leap_year(year)):
        return 53
    return 52


def date_from_iso_week(year: int, week: int, weekday: int = 1) -> date:
    """Resolve an ISO week date; the result may fall in the neighbouring calendar year."""
    weeks = iso_weeks_in_year(year)
    if not 1 <= week <= weeks:
        raise DateRangeError(f"week {week} out of range 1..{weeks} for {year:04d}")
    if not 1 <= weekday <= 7:
        raise DateRangeError(f"weekday {weekday} out of range 1..7")
    return _week_one_monday(year) + timedelta(weeks=week - 1, days=weekday - 1)


def iso_week_of(day: date) -> tuple[int, int, int]:
    """Inverse of :func:`date_from_iso_week`: ``(iso_year, week, weekday)``."""
    year = day.year
    week_one = _week_one_monday(year)
    if day < week_one:
        year -= 1
        week_one = _week_one_monday(year)
    elif year < MAX_YEAR:
        following = _week_one_monday(year + 1)
        if day >= following:
            year += 1
            week_one = following
    return year, (day - week_one).days // 7 + 1, day.isoweekday()


def format_iso_week(day: date) -> str:
    """Render ``day`` in extended ISO week notation, e.g. ``2024-W05-3``."""
    year, week, weekday = iso_week_of(day)
    return f"{year:04d}-W{week:02d}-{weekday}"


def check_time(hour: int, minute: int, second: int, microsecond: int) -> None:
    """Validate clock fields. ``24:00:00`` is accepted as the end of a day, nothing later."""
    if not 0 <= hour <= 24:
        raise DateRangeError(f"hour {hour} out of range 0..24")
    if not 0 <= minute <= 59:
        raise DateRangeError(f"minute {minute} out of range 0..59")
    if second == 60:
        raise DateRangeError("leap seconds are not supported")
    if not 0 <= second <= 59:
        raise DateRangeError(f"second {second} out of range 0..59")
    if hour == 24 and (minute or second or microsecond):
        raise DateRangeError("hour 24 is only allowed as 24:00:00 (end of day)")
