"""Parsing of single cron fields into the sets of values they allow."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


class CronError(ValueError):
    """Raised for malformed or unsatisfiable cron expressions."""


MONTH_NAMES: Mapping[str, int] = {
    name: number
    for number, name in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
        start=1,
    )
}
DAY_NAMES: Mapping[str, int] = {
    name: number for number, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])
}


@dataclass(frozen=True, eq=False)
class FieldSpec:
    """Static description of one cron field: its name, bounds and accepted aliases."""

    name: str
    low: int
    high: int
    names: Mapping[str, int] = field(default_factory=dict)


SECOND = FieldSpec("second", 0, 59)
MINUTE = FieldSpec("minute", 0, 59)
HOUR = FieldSpec("hour", 0, 23)
DAY_OF_MONTH = FieldSpec("day-of-month", 1, 31)
MONTH = FieldSpec("month", 1, 12, MONTH_NAMES)
# 7 is accepted as a second spelling of Sunday and folded onto 0 after parsing.
DAY_OF_WEEK = FieldSpec("day-of-week", 0, 7, DAY_NAMES)

_DAY_FIELDS = (DAY_OF_MONTH, DAY_OF_WEEK)


@dataclass(frozen=True)
class Term:
    """One comma-separated item of a field: ``start``..``end`` inclusive, every ``step``."""

    start: int
    end: int
    step: int = 1

    def values(self) -> range:
        return range(self.start, self.end + 1, self.step)


@dataclass(frozen=True)
class Field:
    """A parsed field.

    ``wildcard`` records whether the text started with ``*`` or ``?``. Like Vixie cron, the
    day-of-month/day-of-week OR rule only applies when *neither* day field is a wildcard, so
    ``*/2`` counts as a wildcard there even though it restricts the values.
    """

    spec: FieldSpec
    text: str
    terms: tuple[Term, ...]
    values: tuple[int, ...]
    last_day: bool = False
    wildcard: bool = False

    def __contains__(self, value: object) -> bool:
        return value in self.values

    @property
    def is_any(self) -> bool:
        """True when the field is a bare ``*`` (or ``?``) and so allows everything."""
        return self.text in ("*", "?")


def parse_field(text: str, spec: FieldSpec) -> Field:
    """Parse the text of one field (e.g. ``"1-5,10/15"``) according to ``spec``."""
    if not text:
        raise CronError(f"{spec.name}: empty field")
    terms: list[Term] = []
    values: set[int] = set()
    last_day = False
    for part in text.split(","):
        if not part:
            raise CronError(f"{spec.name}: empty list item in {text!r}")
        if part.upper() == "L":
            if spec is not DAY_OF_MONTH:
                raise CronError(f"{spec.name}: 'L' is only allowed in the day-of-month field")
            last_day = True
            continue
        term = _parse_term(part, spec)
        terms.append(term)
        values.update(term.values())
    if spec is DAY_OF_WEEK and 7 in values:
        values.discard(7)
        values.add(0)
    return Field(
        spec=spec,
        text=text,
        terms=tuple(terms),
        values=tuple(sorted(values)),
        last_day=last_day,
        wildcard=text[0] in "*?",
    )


def _parse_term(part: str, spec: FieldSpec) -> Term:
    range_text, slash, step_text = part.partition("/")
    step = 1
    if slash:
        if not (step_text.isascii() and step_text.isdigit()):
            raise CronError(f"{spec.name}: invalid step {step_text!r} in {part!r}")
        step = int(step_text)
        if step < 1:
            raise CronError(f"{spec.name}: step must be at least 1 in {part!r}")
    if range_text in ("*", "?"):
        if range_text == "?" and spec not in _DAY_FIELDS:
            raise CronError(f"{spec.name}: '?' is only allowed in the day fields")
        return Term(spec.low, spec.high, step)
    if "-" in range_text:
        start_text, _, end_text = range_text.partition("-")
        start = _parse_value(start_text, spec)
        end = _parse_value(end_text, spec)
        if start > end:
            raise CronError(f"{spec.name}: range {range_text!r} runs backwards")
        return Term(start, end, step)
    start = _parse_value(range_text, spec)
    # "a/s" means "from a to the top of the field, every s", as in Vixie cron.
    return Term(start, spec.high if slash else start, step)


def _parse_value(text: str, spec: FieldSpec) -> int:
    if not text:
        raise CronError(f"{spec.name}: missing value")
    if text.isascii() and text.isdigit():
        value = int(text)
    else:
        named = spec.names.get(text.upper())
        if named is None:
            raise CronError(f"{spec.name}: unknown value {text!r}")
        value = named
    if not spec.low <= value <= spec.high:
        raise CronError(f"{spec.name}: {value} is out of range {spec.low}-{spec.high}")
    return value
