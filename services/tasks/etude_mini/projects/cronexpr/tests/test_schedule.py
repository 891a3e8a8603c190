from datetime import datetime, timedelta, timezone

import pytest

from cronexpr import CronError, CronExpression, describe, parse


def test_next_after_is_strictly_after_a_matching_moment():
    expr = parse("30 9 * * *")
    assert expr.next_after(datetime(2024, 5, 1, 9, 30)) == datetime(2024, 5, 2, 9, 30)


def test_next_after_rounds_up_partial_minutes():
    expr = parse("* * * * *")
    assert expr.next_after(datetime(2024, 5, 1, 9, 30, 59, 999)) == datetime(2024, 5, 1, 9, 31)


def test_next_after_rolls_over_the_year():
    expr = parse("0 0 1 1 *")
    assert expr.next_after(datetime(2023, 12, 31, 23, 59)) == datetime(2024, 1, 1, 0, 0)


def test_next_after_carries_hour_when_minutes_exhausted():
    expr = parse("0,30 9-10 * * *")
    assert expr.next_after(datetime(2024, 5, 1, 9, 30)) == datetime(2024, 5, 1, 10, 0)
    assert expr.next_after(datetime(2024, 5, 1, 10, 30)) == datetime(2024, 5, 2, 9, 0)


def test_next_after_with_seconds_field():
    expr = parse("*/20 * * * * *")
    assert expr.next_after(datetime(2024, 5, 1, 9, 30, 40)) == datetime(2024, 5, 1, 9, 31, 0)
    assert expr.next_after(datetime(2024, 5, 1, 9, 30, 39, 1)) == datetime(2024, 5, 1, 9, 30, 40)


def test_last_day_of_month_tracks_month_length():
    expr = parse("0 12 L * *")
    times = expr.next_times(datetime(2024, 1, 31, 12, 0), 3)
    assert times == [
        datetime(2024, 2, 29, 12, 0),
        datetime(2024, 3, 31, 12, 0),
        datetime(2024, 4, 30, 12, 0),
    ]


def test_day_of_month_or_day_of_week_rule():
    # The 13th or any Friday.
    expr = parse("0 0 13 * FRI")
    times = expr.next_times(datetime(2024, 9, 1), 4)
    assert times == [
        datetime(2024, 9, 6),
        datetime(2024, 9, 13),
        datetime(2024, 9, 20),
        datetime(2024, 9, 27),
    ]


def test_wildcard_day_field_means_both_must_match():
    # "*/2" restricts the days but still counts as a wildcard, so odd days that are Mondays.
    expr = parse("0 0 */2 * MON")
    assert expr.uses_or_rule is False
    assert expr.next_times(datetime(2024, 1, 1), 3) == [
        datetime(2024, 1, 15),
        datetime(2024, 1, 29),
        datetime(2024, 2, 5),
    ]


def test_jumping_to_a_later_month_starts_at_its_first_minute():
    expr = parse("*/30 * * MAR,DEC *")
    assert expr.next_after(datetime(2023, 1, 15, 10, 45)) == datetime(2023, 3, 1, 0, 0)
    assert expr.next_after(datetime(2023, 3, 31, 23, 30)) == datetime(2023, 12, 1, 0, 0)
    assert expr.next_after(datetime(2023, 12, 31, 23, 30)) == datetime(2024, 3, 1, 0, 0)


def test_next_after_crosses_into_january():
    assert parse("0 0 1 * *").next_after(datetime(2023, 12, 15)) == datetime(2024, 1, 1)


def test_skips_months_missing_the_requested_day():
    expr = parse("0 0 31 * *")
    assert expr.next_after(datetime(2024, 1, 31)) == datetime(2024, 3, 31)


def test_leap_day_search_spans_the_century_gap():
    expr = parse("0 0 29 2 *")
    assert expr.next_after(datetime(2096, 3, 1)) == datetime(2104, 2, 29)


def test_leap_day_on_a_given_weekday_needs_the_and_rule():
    expr = parse("0 0 29 2 ?")
    assert expr.next_after(datetime(2024, 2, 29)) == datetime(2028, 2, 29)
    assert parse("0 0 29 2 MON").next_after(datetime(2024, 3, 1)) == datetime(2025, 2, 3)


def test_previous_before_is_strictly_before():
    expr = parse("0 * * * *")
    assert expr.previous_before(datetime(2024, 5, 1, 10, 0)) == datetime(2024, 5, 1, 9, 0)


def test_previous_before_counts_the_current_minute_when_seconds_have_passed():
    expr = parse("0 * * * *")
    assert expr.previous_before(datetime(2024, 5, 1, 10, 0, 1)) == datetime(2024, 5, 1, 10, 0)


def test_previous_before_rolls_back_into_previous_month_and_year():
    expr = parse("45 23 L * *")
    assert expr.previous_before(datetime(2024, 3, 1)) == datetime(2024, 2, 29, 23, 45)
    assert parse("0 0 * 12 *").previous_before(datetime(2024, 6, 1)) == datetime(2023, 12, 31)


def test_previous_before_walks_back_month_by_month():
    expr = parse("0 12 15 * *")
    assert expr.previous_before(datetime(2024, 3, 10)) == datetime(2024, 2, 15, 12, 0)
    assert parse("0 0 * JAN *").previous_before(datetime(2024, 6, 1)) == datetime(2024, 1, 31)
    assert parse("30 6 * 11 *").previous_before(datetime(2024, 12, 1)) == datetime(
        2024, 11, 30, 6, 30
    )


def test_previous_before_with_seconds_field():
    expr = parse("*/20 * * * * *")
    assert expr.previous_before(datetime(2024, 5, 1, 10, 0, 30)) == datetime(2024, 5, 1, 10, 0, 20)
    assert expr.previous_before(datetime(2024, 5, 1, 10, 0, 0)) == datetime(2024, 5, 1, 9, 59, 40)
    assert expr.previous_before(datetime(2024, 5, 1, 10, 0, 20, 5)) == datetime(
        2024, 5, 1, 10, 0, 20
    )


def test_previous_before_picks_latest_time_of_day():
    expr = parse("10,50 8,17 * * MON-FRI")
    assert expr.previous_before(datetime(2024, 5, 6, 8, 0)) == datetime(2024, 5, 3, 17, 50)
    assert expr.previous_before(datetime(2024, 5, 6, 17, 30)) == datetime(2024, 5, 6, 17, 10)


def test_next_and_previous_are_inverse_around_firing_times():
    expr = parse("7 */6 * * *")
    moment = datetime(2024, 7, 4, 12, 7)
    assert expr.previous_before(expr.next_after(moment)) == moment
    assert expr.next_after(expr.previous_before(moment)) == moment


def test_timezone_is_preserved():
    tz = timezone(timedelta(hours=2))
    expr = parse("@hourly")
    assert expr.next_after(datetime(2024, 1, 1, 5, 30, tzinfo=tz)) == datetime(
        2024, 1, 1, 6, 0, tzinfo=tz
    )


def test_matches_truncates_to_resolution():
    assert parse("30 9 * * *").matches(datetime(2024, 5, 1, 9, 30, 45)) is True
    assert parse("0 30 9 * * *").matches(datetime(2024, 5, 1, 9, 30, 45)) is False
    assert parse("30 9 * * SUN").matches(datetime(2024, 5, 1, 9, 30)) is False


def test_next_times_rejects_negative_count():
    with pytest.raises(ValueError, match="count must not be negative"):
        parse("* * * * *").next_times(datetime(2024, 1, 1), -1)
    assert parse("* * * * *").next_times(datetime(2024, 1, 1), 0) == []


def test_no_firing_time_beyond_the_calendar():
    with pytest.raises(CronError, match="no firing time found after 9999-06-01T00:01:00"):
        parse("0 0 1 1 *").next_after(datetime(9999, 6, 1))
    with pytest.raises(CronError, match="no firing time found before 0001-01-01T11:59:00"):
        parse("0 0 2 1 *").previous_before(datetime(1, 1, 1, 12))
    with pytest.raises(CronError, match="after the end of the calendar"):
        parse("* * * * *").next_after(datetime.max)
    with pytest.raises(CronError, match="before the start of the calendar"):
        parse("* * * * *").previous_before(datetime.min)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("* * * * *", "Every minute"),
        ("30 9 * * *", "At 09:30"),
        ("0 30 9 * * *", "At 09:30:00"),
        (
            "*/15 9-17 * * MON-FRI",
            "Every 15 minutes, during hours 9 through 17, on Monday through Friday",
        ),
        ("0 */2 * * *", "At minute 0, every 2 hours"),
        ("5/20 * * * *", "Every 20 minutes from 5 through 59"),
        ("0 12 1,15 * 1", "At 12:00, on days 1 and 15 of the month or on Monday"),
        ("0 0 1,L * *", "At 00:00, on day 1 and the last day of the month"),
        ("0 0 L * *", "At 00:00, on the last day of the month"),
        ("0 0 * */3 *", "At 00:00, in January, April, July and October"),
        ("@weekly", "At 00:00, on Sunday"),
        ("30 * * * * *", "At second 30, every minute"),
        ("*/10 5 * * * *", "Every 10 seconds, at minute 5"),
        ("0 0-23 * * *", "At minute 0, during hours 0 through 23"),
        ("0 8-18/2 * * *", "At minute 0, every 2 hours from 8 through 18"),
        ("0 0 1-9/2,20 * *", "At 00:00, on days 1 through 9 (every 2) and 20 of the month"),
        ("0 0 * * MON-FRI/2", "At 00:00, on Monday, Wednesday and Friday"),
        ("*/60 6 * * *", "At 06:00"),
        (
            "0,30 8 * JAN-MAR SAT,SUN",
            "At minutes 0 and 30, during hour 8, on Saturday and Sunday, in January through March",
        ),
    ],
    ids=[
        "every-minute",
        "daily-time",
        "with-seconds",
        "business-hours",
        "every-two-hours",
        "offset-step",
        "or-rule",
        "first-and-last",
        "last-day",
        "quarterly",
        "macro",
        "seconds-field",
        "every-n-seconds",
        "explicit-full-range",
        "stepped-hour-range",
        "stepped-days-in-list",
        "stepped-weekdays",
        "step-leaves-one-value",
        "lists-and-months",
    ],
)
def test_describe(text, expected):
    assert describe(text) == expected


def test_describe_accepts_parsed_expression_and_str_round_trips():
    expr = CronExpression("@daily")
    assert str(expr) == "@daily"
    assert repr(expr) == "CronExpression('@daily')"
    assert describe(expr) == "At 00:00"
