"""Structured logging on the standard library: `key=value` on a console, JSON in a cluster.

Fields go in `extra={"fields": {...}}` or through `log_fields(...)`; they are rendered
after the message in console mode and as top-level keys in JSON mode.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from etude.common.settings import LogSettings

_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


def log_fields(**fields: Any) -> dict[str, Any]:
    """`logger.info("msg", extra=log_fields(session=sid))`."""
    return {"fields": fields}


def _fields_of(record: logging.LogRecord) -> dict[str, Any]:
    fields = dict(getattr(record, "fields", {}) or {})
    for key, value in record.__dict__.items():
        if key not in _RESERVED and key != "fields":
            fields[key] = value
    return fields


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_fields_of(record),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        fields = " ".join(f"{k}={v}" for k, v in _fields_of(record).items())
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if fields:
            line = f"{line}  {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def configure_logging(settings: LogSettings) -> None:
    """Route every logger to stderr in the configured format. Safe to call twice."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.format == "json" else ConsoleFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.level.upper())
