"""Structured logs: one JSON object per line in a cluster, key=value on a console."""

from __future__ import annotations

import json
import logging

import pytest

from etude.common.logging import configure_logging, log_fields
from etude.common.settings import LogSettings


@pytest.fixture(autouse=True)
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_fields_and_exceptions(capsys):
    configure_logging(LogSettings(format="json", level="DEBUG"))
    log = logging.getLogger("etude.test")
    log.info("session opened", extra=log_fields(session="se-1", tools=3))
    try:
        raise ValueError("bad input")
    except ValueError:
        log.exception("tool failed")
    lines = capsys.readouterr().err.strip().splitlines()
    first, second = (json.loads(line) for line in lines)
    assert first["msg"] == "session opened" and first["level"] == "info"
    assert first["session"] == "se-1" and first["tools"] == 3
    assert first["logger"] == "etude.test"
    assert second["level"] == "error" and "ValueError: bad input" in second["exc"]


def test_console_lines_are_readable_and_levels_filter(capsys):
    configure_logging(LogSettings(format="console", level="WARNING"))
    log = logging.getLogger("etude.test")
    log.info("hidden")
    log.warning("queue slow", extra=log_fields(stream="etude:r:rollouts"))
    err = capsys.readouterr().err
    assert "hidden" not in err
    assert "WARNING" in err and "queue slow  stream=etude:r:rollouts" in err


def test_configuring_twice_does_not_duplicate_lines(capsys):
    configure_logging(LogSettings(format="json"))
    configure_logging(LogSettings(format="json"))
    logging.getLogger("etude.test").warning("once")
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
