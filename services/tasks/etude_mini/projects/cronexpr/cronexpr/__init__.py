"""Cron expression parsing, scheduling and description."""

from .describe import describe
from .expression import MACROS, CronExpression, parse
from .fields import CronError, Field, Term, parse_field

__all__ = [
    "MACROS",
    "CronError",
    "CronExpression",
    "Field",
    "Term",
    "describe",
    "parse",
    "parse_field",
]
