"""Plain-English descriptions of cron expressions."""

from __future__ import annotations

from collections.abc import Callable

from .expression import CronExpression
from .fields import Field, Term

_MONTHS = (
    *("January", "February", "March", "April", "May", "June"),
    *("July", "August", "September", "October", "November", "December"),
)
# Cron accepts both 0 and 7 for Sunday.
_WEEKDAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def describe(expression: CronExpression | str) -> str:
    """Describe when ``expression`` fires, e.g. ``"At 09:30, on Monday through Friday"``."""
    expr = expression if isinstance(expression, CronExpression) else CronExpression(expression)
    months = _calendar_labels(expr.months, lambda number: _MONTHS[number - 1])
    month_part = "" if expr.months.is_any else "in " + _join(months)
    parts = (_describe_time(expr), _describe_days(expr), month_part)
    sentence = ", ".join(part for part in parts if part)
    return sentence[0].upper() + sentence[1:]


def _describe_time(expr: CronExpression) -> str:
    clock_fields = [expr.hours, expr.minutes] + ([expr.seconds] if expr.has_seconds else [])
    if all(len(f.values) == 1 for f in clock_fields):
        return "at " + ":".join(f"{f.values[0]:02d}" for f in clock_fields)
    phrases = []
    if expr.has_seconds:
        phrases.append(_describe_unit(expr.seconds, "second", "at"))
    phrases.append(_describe_unit(expr.minutes, "minute", "at"))
    if not expr.hours.is_any:
        phrases.append(_describe_unit(expr.hours, "hour", "during"))
    return ", ".join(phrases)


def _describe_unit(field: Field, unit: str, preposition: str) -> str:
    """Describe a clock field such as minutes: "every 15 minutes", "at minutes 0 and 30"."""
    if field.is_any:
        return f"every {unit}"
    if len(field.terms) == 1:
        term = field.terms[0]
        full_range = term.start == field.spec.low and term.end == field.spec.high
        if term.step > 1 and full_range:
            return f"every {term.step} {unit}s"
        if term.step > 1:
            return f"every {term.step} {unit}s from {term.start} through {term.end}"
    plural = "s" if len(field.values) > 1 else ""
    return f"{preposition} {unit}{plural} " + _join(_labels(field, str))


def _describe_days(expr: CronExpression) -> str:
    dom = "" if expr.days.is_any else _describe_days_of_month(expr.days)
    dow = (
        ""
        if expr.weekdays.is_any
        else "on " + _join(_calendar_labels(expr.weekdays, lambda number: _WEEKDAYS[number]))
    )
    if dom and dow:
        return f"{dom} {'or' if expr.uses_or_rule else 'and'} {dow}"
    return dom or dow


def _describe_days_of_month(field: Field) -> str:
    labels = _labels(field, str)
    if not labels:
        return "on the last day of the month"
    plural = "s" if len(field.values) > 1 else ""
    text = f"on day{plural} " + _join(labels)
    if field.last_day:
        text += " and the last day"
    return text + " of the month"


def _labels(field: Field, name: Callable[[int], str]) -> list[str]:
    return [_term_label(term, name) for term in field.terms]


def _calendar_labels(field: Field, name: Callable[[int], str]) -> list[str]:
    """Labels for months and weekdays, where stepped ranges read best spelled out."""
    if any(term.step > 1 for term in field.terms):
        return [name(value) for value in field.values]
    return _labels(field, name)


def _term_label(term: Term, name: Callable[[int], str]) -> str:
    if term.start == term.end:
        return name(term.start)
    text = f"{name(term.start)} through {name(term.end)}"
    if term.step > 1:
        text += f" (every {term.step})"
    return text


def _join(labels: list[str]) -> str:
    if len(labels) <= 1:
        return "".join(labels)
    return ", ".join(labels[:-1]) + " and " + labels[-1]
