from datetime import date

import pytest
from datewise import (
    DateRangeError,
    date_from_iso_week,
    date_from_ordinal,
    days_in_month,
    format_iso_week,
    is_leap_year,
    iso_week_of,
    iso_weeks_in_year,
)


@pytest.mark.parametrize(
    ("year", "expected"),
    [(2024, True), (2023, False), (1900, False), (2000, True), (2100, False), (1600, True)],
)
def test_leap_year_rule_handles_centuries(year, expected):
    assert is_leap_year(year) is expected


def test_days_in_month_for_every_month_of_a_leap_year():
    assert [days_in_month(2024, m) for m in range(1, 13)] == [
        31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31,
    ]  # fmt: skip


def test_february_has_28_days_in_common_years():
    assert days_in_month(2023, 2) == 28
    assert days_in_month(1900, 2) == 28


@pytest.mark.parametrize("month", [0, 13])
def test_days_in_month_rejects_out_of_range_month(month):
    with pytest.raises(DateRangeError, match=f"month {month} out of range 1..12"):
        days_in_month(2024, month)


@pytest.mark.parametrize(
    ("year", "weeks"), [(2020, 53), (2015, 53), (2026, 53), (2024, 52), (2021, 52), (2032, 53)]
)
def test_iso_weeks_in_year_counts_53_week_years(year, weeks):
    assert iso_weeks_in_year(year) == weeks


def test_week_one_can_start_in_previous_year():
    assert date_from_iso_week(2020, 1, 1) == date(2019, 12, 30)
    assert date_from_iso_week(2026, 53, 7) == date(2027, 1, 3)


def test_week_53_rejected_in_52_week_year():
    with pytest.raises(DateRangeError, match=r"week 53 out of range 1\.\.52 for 2024"):
        date_from_iso_week(2024, 53, 1)


@pytest.mark.parametrize("weekday", [0, 8])
def test_iso_weekday_must_be_between_one_and_seven(weekday):
    with pytest.raises(DateRangeError, match=f"weekday {weekday} out of range 1..7"):
        date_from_iso_week(2024, 5, weekday)


def test_ordinal_dates_cover_last_day_of_leap_and_common_years():
    assert date_from_ordinal(2024, 366) == date(2024, 12, 31)
    assert date_from_ordinal(2023, 365) == date(2023, 12, 31)
    assert date_from_ordinal(2024, 60) == date(2024, 2, 29)
    with pytest.raises(DateRangeError, match=r"day of year 366 out of range 1\.\.365 for 2023"):
        date_from_ordinal(2023, 366)
    with pytest.raises(DateRangeError, match="day of year 0 out of range"):
        date_from_ordinal(2023, 0)


def test_iso_week_of_matches_standard_library_around_year_boundaries():
    days = [date(2019, 12, 29), date(2019, 12, 30), date(2021, 1, 3), date(2021, 1, 4)]
    days += [date(2026, 12, 31), date(2027, 1, 3), date(2027, 1, 4), date(2024, 12, 30)]
    for day in days:
        assert iso_week_of(day) == tuple(day.isocalendar())


def test_format_iso_week_round_trips_through_week_dates():
    assert format_iso_week(date(2024, 1, 31)) == "2024-W05-3"
    assert format_iso_week(date(2019, 12, 30)) == "2020-W01-1"
    assert format_iso_week(date(2021, 1, 3)) == "2020-W53-7"


def test_first_and_last_representable_days():
    assert date_from_ordinal(1, 1) == date(1, 1, 1)
    assert iso_week_of(date(1, 1, 1)) == (1, 1, 1)
    assert iso_week_of(date(9999, 12, 31)) == (9999, 52, 5)
    assert format_iso_week(date(9999, 12, 31)) == "9999-W52-5"


def test_ordinal_day_one_and_overflow_in_leap_year():
    assert date_from_ordinal(2024, 1) == date(2024, 1, 1)
    with pytest.raises(DateRangeError, match=r"day of year 367 out of range 1\.\.366 for 2024"):
        date_from_ordinal(2024, 367)


def test_week_defaults_to_monday_and_week_zero_is_rejected():
    assert date_from_iso_week(2024, 5) == date(2024, 1, 29)
    assert date_from_iso_week(2020, 53, 1) == date(2020, 12, 28)
    with pytest.raises(DateRangeError, match=r"week 0 out of range 1\.\.52 for 2024"):
        date_from_iso_week(2024, 0, 1)
