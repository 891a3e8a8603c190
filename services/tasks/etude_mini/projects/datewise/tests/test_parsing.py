from datetime import UTC, date, datetime, time, timedelta, timezone

import pytest
from datewise import (
    DateParseError,
    DateRangeError,
    parse,
    parse_date,
    parse_datetime,
    parse_offset,
    parse_time,
)
from datewise.parsing import ordinal_suffix

UTC = UTC


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2024-03-07", date(2024, 3, 7), id="extended"),
        pytest.param("20240307", date(2024, 3, 7), id="basic"),
        pytest.param("2024-03", date(2024, 3, 1), id="year-month"),
        pytest.param("2024-W05-3", date(2024, 1, 31), id="week-extended"),
        pytest.param("2024W053", date(2024, 1, 31), id="week-basic"),
        pytest.param("2024-W05", date(2024, 1, 29), id="week-without-day"),
        pytest.param("2024-067", date(2024, 3, 7), id="ordinal-extended"),
        pytest.param("2024067", date(2024, 3, 7), id="ordinal-basic"),
        pytest.param("2024/3/7", date(2024, 3, 7), id="slashed"),
        pytest.param("  2024-03-07\n", date(2024, 3, 7), id="outer-whitespace"),
    ],
)
def test_parses_iso_and_slashed_dates(text, expected):
    assert parse_date(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("3 Mar 2024", date(2024, 3, 3), id="day-abbrev-year"),
        pytest.param("3 march 2024", date(2024, 3, 3), id="lowercase-month"),
        pytest.param("March 3, 2024", date(2024, 3, 3), id="us-style"),
        pytest.param("Sept. 21 2023", date(2023, 9, 21), id="sept-dot"),
        pytest.param("1st Jan 2000", date(2000, 1, 1), id="ordinal-1st"),
        pytest.param("December 22nd, 1999", date(1999, 12, 22), id="ordinal-22nd"),
        pytest.param("13th Feb 2001", date(2001, 2, 13), id="ordinal-13th"),
    ],
)
def test_parses_human_dates(text, expected):
    assert parse_date(text) == expected


def test_ordinal_suffix_must_match_the_day():
    with pytest.raises(DateParseError, match="wrong ordinal suffix 11st, expected th"):
        parse_date("11st May 2024")
    with pytest.raises(DateParseError, match="wrong ordinal suffix 3th, expected rd"):
        parse_date("May 3th, 2024")


SUFFIXES = {1: "st", 2: "nd", 3: "rd", 4: "th", 11: "th", 12: "th", 13: "th", 21: "st"}
SUFFIXES |= {22: "nd", 23: "rd", 31: "st", 111: "th", 112: "th", 121: "st", 1013: "th"}


@pytest.mark.parametrize(("day", "suffix"), SUFFIXES.items())
def test_ordinal_suffixes_follow_english_rules(day, suffix):
    assert ordinal_suffix(day) == suffix


def test_unknown_month_name_is_reported():
    with pytest.raises(DateParseError, match="unknown month name 'Foo'"):
        parse_date("3 Foo 2024")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2023-02-29", "day 29 out of range 1..28 for 2023-02"),
        ("2024-02-30", "day 30 out of range 1..29 for 2024-02"),
        ("2024-04-31", "day 31 out of range 1..30 for 2024-04"),
        ("2024-13-01", "month 13 out of range 1..12"),
        ("2024-00-10", "month 0 out of range 1..12"),
        ("2024-01-00", "day 0 out of range 1..31"),
        ("0000-01-01", "year 0 out of range 1..9999"),
        ("2023-366", "day of year 366 out of range 1..365 for 2023"),
        ("2026-W54", "week 54 out of range 1..53 for 2026"),
    ],
)
def test_date_fields_are_range_checked(text, message):
    with pytest.raises(DateRangeError, match=message):
        parse_date(text)


def test_leap_day_is_accepted_in_leap_years():
    assert parse_date("2000-02-29") == date(2000, 2, 29)
    assert parse_date("0001-01-01") == date(1, 1, 1)
    assert parse_date("9999-12-31") == date(9999, 12, 31)
    assert parse_date("29 Feb 2024") == date(2024, 2, 29)


@pytest.mark.parametrize("text", ["2024-3-7", "24-03-07", "2024.03.07", "", "   ", "W05"])
def test_rejects_malformed_dates(text):
    with pytest.raises(DateParseError, match=r"unrecognised date|empty input"):
        parse_date(text)


def test_parse_date_requires_a_string():
    with pytest.raises(TypeError, match="expected str, got int"):
        parse_date(20240307)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("14:30", time(14, 30), id="hh-mm"),
        pytest.param("14:30:15", time(14, 30, 15), id="hh-mm-ss"),
        pytest.param("143015", time(14, 30, 15), id="basic"),
        pytest.param("T0930", time(9, 30), id="leading-t"),
        pytest.param("14", time(14), id="hour-only"),
        pytest.param("00:00:00", time(0), id="midnight"),
        pytest.param("23:59:59", time(23, 59, 59), id="last-second"),
        pytest.param("14:30:15.5", time(14, 30, 15, 500000), id="fraction"),
        pytest.param("14:30:15,25", time(14, 30, 15, 250000), id="comma-fraction"),
        pytest.param("23:59:59.9999999", time(23, 59, 59, 999999), id="truncated"),
    ],
)
def test_parses_times(text, expected):
    assert parse_time(text) == expected


def test_time_separators_must_be_consistent():
    with pytest.raises(DateParseError, match="unrecognised time"):
        parse_time("14:3015")


@pytest.mark.parametrize(
    ("token", "offset"),
    [
        ("Z", timedelta(0)),
        ("+05:30", timedelta(hours=5, minutes=30)),
        ("-0800", timedelta(hours=-8)),
        ("+01", timedelta(hours=1)),
        ("-00:30", timedelta(minutes=-30)),
        ("+23:59", timedelta(hours=23, minutes=59)),
    ],
)
def test_parses_utc_offsets(token, offset):
    assert parse_offset(token) == timezone(offset)
    assert parse_time("12:00" + token).utcoffset() == offset


def test_offset_fields_are_range_checked():
    with pytest.raises(DateRangeError, match=r"offset hour 24 out of range 0\.\.23"):
        parse_offset("+24:00")
    with pytest.raises(DateRangeError, match=r"offset minute 60 out of range 0\.\.59"):
        parse_offset("+05:60")
    assert parse_offset(None) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("25:00", "hour 25 out of range 0..24"),
        ("12:60", "minute 60 out of range 0..59"),
        ("12:30:61", "second 61 out of range 0..59"),
        ("23:59:60", "leap seconds are not supported"),
        ("24:00:01", "hour 24 is only allowed as 24:00:00"),
        ("24:00", "24:00 needs a date"),
    ],
)
def test_time_fields_are_range_checked(text, message):
    with pytest.raises(DateRangeError, match=message):
        parse_time(text)


def test_parses_datetimes_with_offsets():
    assert parse_datetime("2024-03-07T14:30:00Z") == datetime(2024, 3, 7, 14, 30, tzinfo=UTC)
    east = parse_datetime("20240307T1430+0100")
    assert east == datetime(2024, 3, 7, 13, 30, tzinfo=UTC)
    assert east.utcoffset() == timedelta(hours=1)
    assert parse_datetime("2024-03-07 14:30").tzinfo is None


def test_datetime_accepts_week_ordinal_and_human_dates():
    assert parse_datetime("2024-W05-3T08:00") == datetime(2024, 1, 31, 8)
    assert parse_datetime("2024-067T08") == datetime(2024, 3, 7, 8)
    assert parse_datetime("March 3, 2024 10:15") == datetime(2024, 3, 3, 10, 15)


def test_hour_24_rolls_over_to_next_day_including_year_end():
    assert parse_datetime("2024-02-28T24:00") == datetime(2024, 2, 29)
    assert parse_datetime("2023-12-31T24:00:00Z") == datetime(2024, 1, 1, tzinfo=UTC)
    with pytest.raises(DateRangeError, match="overflows"):
        parse_datetime("9999-12-31T24:00")


def test_space_separator_requires_extended_time():
    with pytest.raises(DateParseError, match="unrecognised datetime"):
        parse_datetime("2024-03-07 1430")
    with pytest.raises(DateParseError, match="unrecognised datetime"):
        parse_datetime("2024-03-07")


def test_generic_parse_picks_the_right_type():
    assert parse("2024-03-07") == date(2024, 3, 7)
    assert type(parse("2024-03-07")) is date
    assert parse("2024-03-07T01:02:03") == datetime(2024, 3, 7, 1, 2, 3)
    assert parse("01:02") == time(1, 2)
    assert parse("T0102") == time(1, 2)


def test_generic_parse_never_reads_a_bare_number_as_a_time():
    with pytest.raises(DateParseError, match="unrecognised date, time or datetime '2024'"):
        parse("2024")


def test_generic_parse_propagates_range_errors():
    with pytest.raises(DateRangeError, match=r"day 31 out of range 1\.\.30 for 2024-06"):
        parse("2024-06-31")
