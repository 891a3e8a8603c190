"""Exception hierarchy shared by every parser in the package."""


class DateParseError(ValueError):
    """The text does not match any supported date, time or datetime syntax."""


class DateRangeError(DateParseError):
    """The syntax was recognised but a field is out of range (month 13, 30 February, ...).

    A subclass, so callers that only care about "bad input" can catch one exception.
    """


class DurationError(ValueError):
    """The text is not a valid ISO 8601 duration, or cannot be converted as requested."""
