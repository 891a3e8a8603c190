"""Cron expressions and the search for their next and previous firing times."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from calendar import monthrange
from datetime import MAXYEAR, MINYEAR, datetime, timedelta

from .fields import (
    DAY_OF_MONTH,
    DAY_OF_WEEK,
    HOUR,
    MINUTE,
    MONTH,
    SECOND,
    CronError,
    parse_field,
)

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# Any satisfiable expression fires within this many years: the worst case is a leap day that
# must also fall on a given weekday, which recurs within a few decades.
SEARCH_YEARS = 100

Clock = tuple[int, int, int]


class CronExpression:
    """A parsed cron expression with five fields, or six when a leading seconds field is given.

    Times are computed in the wall-clock time of the datetime passed in; its ``tzinfo`` is
    carried over unchanged, so daylight-saving transitions are not special-cased.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        source = MACROS.get(text.strip().lower(), text)
        if source.startswith("@"):
            raise CronError(f"unknown macro {text.strip()!r}")
        parts = source.split()
        if len(parts) == 5:
            self.has_seconds = False
            parts.insert(0, "0")
        elif len(parts) == 6:
            self.has_seconds = True
        else:
            raise CronError(f"expected 5 or 6 fields, got {len(parts)}")
        self.seconds = parse_field(parts[0], SECOND)
        self.minutes = parse_field(parts[1], MINUTE)
        self.hours = parse_field(parts[2], HOUR)
        self.days = parse_field(parts[3], DAY_OF_MONTH)
        self.months = parse_field(parts[4], MONTH)
        self.weekdays = parse_field(parts[5], DAY_OF_WEEK)
        self._check_satisfiable()

    def __repr__(self) -> str:
        return f"CronExpression({self.text!r})"

    def __str__(self) -> str:
        return self.text

    @property
    def uses_or_rule(self) -> bool:
        """True when a day matches if *either* day-of-month or day-of-week matches."""
        return not (self.days.wildcard or self.weekdays.wildcard)

    def _check_satisfiable(self) -> None:
        # With the OR rule the weekday alone can always be satisfied, and a weekday-only
        # constraint can be met in any month. Otherwise the day of month must exist in at
        # least one selected month (February counts as 29 days long).
        if self.uses_or_rule or self.days.last_day:
            return
        for month in self.months.values:
            longest = monthrange(2000, month)[1]
            if self.days.values and self.days.values[0] <= longest:
                return
        raise CronError("day-of-month never occurs in the selected months")

    def day_matches(self, year: int, month: int, day: int) -> bool:
        """Apply the day-of-month/day-of-week rules to one calendar day."""
        dom_ok = day in self.days or (self.days.last_day and day == monthrange(year, month)[1])
        # Python counts Monday as 0; cron counts Sunday as 0.
        dow_ok = (datetime(year, month, day).weekday() + 1) % 7 in self.weekdays
        if self.uses_or_rule:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    def matches(self, moment: datetime) -> bool:
        """Whether the expression fires at ``moment``, truncated to the expression's resolution."""
        moment = self._truncate(moment)
        return (
            moment.second in self.seconds
            and moment.minute in self.minutes
            and moment.hour in self.hours
            and moment.month in self.months
            and self.day_matches(moment.year, moment.month, moment.day)
        )

    def next_after(self, moment: datetime) -> datetime:
        """The first firing time strictly after ``moment``."""
        try:
            start = self._truncate(moment) + self._resolution()
        except OverflowError:
            raise CronError("no firing time after the end of the calendar") from None
        return self._search_forward(start)

    def previous_before(self, moment: datetime) -> datetime:
        """The last firing time strictly before ``moment``."""
        floor = self._truncate(moment)
        try:
            start = floor if floor < moment else floor - self._resolution()
        except OverflowError:
            raise CronError("no firing time before the start of the calendar") from None
        return self._search_backward(start)

    def next_times(self, moment: datetime, count: int) -> list[datetime]:
        """The next ``count`` firing times strictly after ``moment``, in order."""
        if count < 0:
            raise ValueError("count must not be negative")
        times: list[datetime] = []
        for _ in range(count):
            moment = self.next_after(moment)
            times.append(moment)
        return times

    def _resolution(self) -> timedelta:
        return timedelta(seconds=1) if self.has_seconds else timedelta(minutes=1)

    def _truncate(self, moment: datetime) -> datetime:
        if self.has_seconds:
            return moment.replace(microsecond=0)
        return moment.replace(second=0, microsecond=0)

    # The searches walk whole months and days and pick the time of day with binary searches,
    # so even expressions that fire once every few years take a few hundred steps at most.

    def _search_forward(self, start: datetime) -> datetime:
        year, month, day = start.year, start.month, start.day
        clock: Clock = (start.hour, start.minute, start.second)
        for _ in range(12 * SEARCH_YEARS):
            if month in self.months:
                for candidate in range(day, monthrange(year, month)[1] + 1):
                    if self.day_matches(year, month, candidate):
                        found = self._first_time_from(clock)
                        if found is not None:
                            return self._build(start, year, month, candidate, found)
                    clock = (0, 0, 0)
            clock, day = (0, 0, 0), 1
            month += 1
            if month > 12:
                month, year = 1, year + 1
                if year > MAXYEAR:
                    break
        raise CronError(f"no firing time found after {start.isoformat()}")

    def _search_backward(self, start: datetime) -> datetime:
        year, month, day = start.year, start.month, start.day
        clock: Clock = (start.hour, start.minute, start.second)
        for _ in range(12 * SEARCH_YEARS):
            if month in self.months:
                for candidate in range(day, 0, -1):
                    if self.day_matches(year, month, candidate):
                        found = self._last_time_until(clock)
                        if found is not None:
                            return self._build(start, year, month, candidate, found)
                    clock = (23, 59, 59)
            clock = (23, 59, 59)
            month -= 1
            if month < 1:
                month, year = 12, year - 1
                if year < MINYEAR:
                    break
            day = monthrange(year, month)[1]
        raise CronError(f"no firing time found before {start.isoformat()}")

    def _first_time_from(self, clock: Clock) -> Clock | None:
        """Earliest allowed time of day that is not earlier than ``clock``."""
        hour, minute, second = clock
        hours, minutes, seconds = self.hours.values, self.minutes.values, self.seconds.values
        for h in hours[bisect_left(hours, hour) :]:
            if h > hour:
                return h, minutes[0], seconds[0]
            for m in minutes[bisect_left(minutes, minute) :]:
                if m > minute:
                    return h, m, seconds[0]
                index = bisect_left(seconds, second)
                if index < len(seconds):
                    return h, m, seconds[index]
        return None

    def _last_time_until(self, clock: Clock) -> Clock | None:
        """Latest allowed time of day that is not later than ``clock``."""
        hour, minute, second = clock
        hours, minutes, seconds = self.hours.values, self.minutes.values, self.seconds.values
        for h in reversed(hours[: bisect_right(hours, hour)]):
            if h < hour:
                return h, minutes[-1], seconds[-1]
            for m in reversed(minutes[: bisect_right(minutes, minute)]):
                if m < minute:
                    return h, m, seconds[-1]
                index = bisect_right(seconds, second)
                if index > 0:
                    return h, m, seconds[index - 1]
        return None

    @staticmethod
    def _build(template: datetime, year: int, month: int, day: int, clock: Clock) -> datetime:
        hour, minute, second = clock
        return template.replace(
            year=year, month=month, day=day, hour=hour, minute=minute, second=second
        )


def parse(text: str) -> CronExpression:
    """Parse ``text`` into a :class:`CronExpression`."""
    return CronExpression(text)
