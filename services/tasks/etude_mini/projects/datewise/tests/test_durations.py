from datetime import timedelta

import pytest
from datewise import Duration, DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("P1DT2H", Duration(days=1, hours=2)),
        ("P1Y2M3DT4H5M6S", Duration(1, 2, 3, 4, 5, 6)),
        ("PT30M", Duration(minutes=30)),
        ("PT1.5S", Duration(seconds=1, microseconds=500000)),
        ("PT0,000001S", Duration(microseconds=1)),
        ("PT0.999999S", Duration(microseconds=999999)),
        ("P2W", Duration(days=14)),
        ("-P3D", Duration(days=3, negative=True)),
        ("+PT1H", Duration(hours=1)),
        ("P0D", Duration()),
    ],
)
def test_parses_iso_durations(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["P", "PT", "P1DT", "1D", "P1H", "PT1D", "P1.5D", "PT5", "P-1D"])
def test_rejects_malformed_durations(text):
    with pytest.raises(DurationError, match="invalid ISO 8601 duration"):
        parse_duration(text)


def test_weeks_cannot_be_mixed_with_other_units():
    with pytest.raises(DurationError, match="weeks cannot be combined"):
        parse_duration("P1W2D")


def test_fraction_limited_to_microseconds():
    with pytest.raises(DurationError, match="at most 6 fractional"):
        parse_duration("PT1.0000001S")


def test_duration_to_timedelta_and_calendar_units():
    assert parse_duration("P1DT2H3M4.5S").to_timedelta() == timedelta(
        days=1, hours=2, minutes=3, seconds=4, microseconds=500000
    )
    assert parse_duration("-PT90M").to_timedelta() == timedelta(minutes=-90)
    with pytest.raises(DurationError, match="years and months have no fixed length"):
        parse_duration("P1M").to_timedelta()


def test_duration_fields_are_validated():
    with pytest.raises(DurationError, match="hours must not be negative"):
        Duration(hours=-1)
    with pytest.raises(DurationError, match="microseconds must be below 1000000"):
        Duration(microseconds=1_000_000)


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (timedelta(days=1, hours=2), "P1DT2H"),
        (timedelta(seconds=90), "PT1M30S"),
        (timedelta(0), "PT0S"),
        (timedelta(milliseconds=1500), "PT1.5S"),
        (timedelta(microseconds=10), "PT0.00001S"),
        (timedelta(hours=-1), "-PT1H"),
        (timedelta(days=-1, hours=23), "-PT1H"),
        (timedelta(days=400), "P400D"),
        (timedelta(hours=1, seconds=1), "PT1H1S"),
    ],
)
def test_formats_timedeltas_canonically(delta, expected):
    assert format_duration(delta) == expected


@pytest.mark.parametrize("text", ["P1Y2M3DT4H5M6S", "P1M", "PT36H", "-P2DT0.25S", "PT0S"])
def test_format_round_trips_canonical_durations(text):
    assert format_duration(parse_duration(text)) == text


def test_format_rejects_other_types():
    with pytest.raises(TypeError, match="expected Duration or timedelta, got int"):
        format_duration(5)
