import pytest

from cronexpr import CronError, CronExpression, parse_field
from cronexpr.fields import DAY_OF_MONTH, DAY_OF_WEEK, HOUR, MINUTE, MONTH


def test_parses_lists_ranges_and_steps():
    field = parse_field("1,5-7,20-30/5", MINUTE)
    assert field.values == (1, 5, 6, 7, 20, 25, 30)


def test_star_step_starts_at_field_minimum():
    assert parse_field("*/20", MINUTE).values == (0, 20, 40)
    assert parse_field("*/10", DAY_OF_MONTH).values == (1, 11, 21, 31)


def test_value_with_step_runs_to_field_maximum():
    assert parse_field("50/3", MINUTE).values == (50, 53, 56, 59)


def test_range_end_is_inclusive():
    assert parse_field("22-23", HOUR).values == (22, 23)


def test_month_and_weekday_names_are_case_insensitive():
    assert parse_field("jan,Mar-MAY", MONTH).values == (1, 3, 4, 5)
    assert parse_field("mon-FRI/2", DAY_OF_WEEK).values == (1, 3, 5)


def test_weekday_seven_is_sunday():
    field = parse_field("5-7", DAY_OF_WEEK)
    assert field.values == (0, 5, 6)


def test_last_day_marker_is_kept_separately_from_values():
    field = parse_field("1,L", DAY_OF_MONTH)
    assert field.values == (1,)
    assert field.last_day is True


def test_wildcard_flag_follows_the_leading_character():
    assert parse_field("*/2", DAY_OF_MONTH).wildcard is True
    assert parse_field("?", DAY_OF_WEEK).wildcard is True
    assert parse_field("1-31", DAY_OF_MONTH).wildcard is False


@pytest.mark.parametrize(
    ("text", "spec", "message"),
    [
        ("60", MINUTE, r"minute: 60 is out of range 0-59"),
        ("0", DAY_OF_MONTH, r"day-of-month: 0 is out of range 1-31"),
        ("13", MONTH, r"month: 13 is out of range 1-12"),
        ("8", DAY_OF_WEEK, r"day-of-week: 8 is out of range 0-7"),
        ("5-1", HOUR, r"hour: range '5-1' runs backwards"),
        ("*/0", MINUTE, r"minute: step must be at least 1"),
        ("*/x", MINUTE, r"minute: invalid step 'x'"),
        ("1,,2", MINUTE, r"minute: empty list item"),
        ("FOO", MONTH, r"month: unknown value 'FOO'"),
        ("MON", MONTH, r"month: unknown value 'MON'"),
        ("L", HOUR, r"hour: 'L' is only allowed in the day-of-month field"),
        ("?", MINUTE, r"minute: '\?' is only allowed in the day fields"),
        ("-5", HOUR, r"hour: missing value"),
    ],
    ids=[
        "minute-too-big",
        "day-zero",
        "month-13",
        "weekday-8",
        "backwards-range",
        "zero-step",
        "non-numeric-step",
        "empty-item",
        "unknown-name",
        "weekday-name-in-month",
        "L-outside-days",
        "question-outside-days",
        "missing-range-start",
    ],
)
def test_rejects_invalid_fields(text, spec, message):
    with pytest.raises(CronError, match=message):
        parse_field(text, spec)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("* * * *", r"expected 5 or 6 fields, got 4"),
        ("* * * * * * *", r"expected 5 or 6 fields, got 7"),
        ("@fortnightly", r"unknown macro '@fortnightly'"),
        ("0 0 30 2 *", r"day-of-month never occurs in the selected months"),
        ("0 0 31 4,6,9,11 *", r"day-of-month never occurs"),
    ],
    ids=["too-few", "too-many", "unknown-macro", "feb-30", "31st-of-short-months"],
)
def test_rejects_invalid_expressions(text, message):
    with pytest.raises(CronError, match=message):
        CronExpression(text)


def test_leap_day_and_last_day_expressions_are_satisfiable():
    assert CronExpression("0 0 29 2 *").days.values == (29,)
    assert CronExpression("0 0 L 2 *").days.last_day is True
    # With the OR rule the weekday alone can fire, so the impossible date is accepted.
    assert CronExpression("0 0 30 2 MON").uses_or_rule is True
