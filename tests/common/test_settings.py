"""Settings come from ETUDE_* variables, are validated, and are read in one place only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from etude.cli.reference import configuration_markdown
from etude.common.ids import new_id
from etude.common.settings import EtudeSettings

SERVICES = Path(__file__).resolve().parents[2] / "services"
ENV_READ = re.compile(r"os\.environ\s*\[|os\.environ\.get|os\.getenv|environ\.get\(")


def test_nested_variables_override_defaults(monkeypatch):
    monkeypatch.setenv("ETUDE_REDIS__URL", "redis://10.0.0.1:6380/2")
    monkeypatch.setenv("ETUDE_GRPC__MAX_MESSAGE_BYTES", "2048")
    monkeypatch.setenv("ETUDE_QUEUE__MAX_DELIVERIES", "7")
    settings = EtudeSettings()
    assert settings.redis.url == "redis://10.0.0.1:6380/2"
    assert settings.grpc.max_message_bytes == 2048
    assert settings.queue.max_deliveries == 7
    assert settings.grpc.grace_seconds == 10.0  # untouched defaults stay


def test_invalid_values_are_rejected_with_the_field_named(monkeypatch):
    monkeypatch.setenv("ETUDE_GRPC__PORT", "70000")
    with pytest.raises(ValidationError, match=r"grpc\.port"):
        EtudeSettings()


def test_no_module_but_settings_reads_the_environment():
    offenders = [
        str(path.relative_to(SERVICES))
        for path in SERVICES.rglob("*.py")
        if path.name != "settings.py" and ENV_READ.search(path.read_text())
    ]
    assert offenders == []


def test_ids_are_unique_prefixed_and_sort_by_time():
    ids = [new_id("ro") for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(i.startswith("ro-") and len(i) == 3 + 22 for i in ids)
    assert ids[0][:15] <= ids[-1][:15]
    with pytest.raises(ValueError):
        new_id("bad prefix")


def test_configuration_reference_is_current():
    docs = SERVICES.parent / "docs" / "configuration.md"
    assert docs.read_text() == configuration_markdown(), "run `make docs`"
