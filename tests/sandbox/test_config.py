"""One sandbox section for sessions and grading: grading shares the binds and takes only
the limits its own block sets."""

from __future__ import annotations

from etude.environment.config import EnvironmentSettings
from etude.reward.config import RewardSettings
from etude.sandbox.config import SandboxSettings


def test_grading_shares_the_binds_and_overrides_only_what_it_sets(monkeypatch):
    monkeypatch.setenv("ETUDE_SANDBOX__RO_BINDS", '["/opt/toolchain"]')
    monkeypatch.setenv("ETUDE_SANDBOX__PROCESSES", "128")
    monkeypatch.setenv("ETUDE_SANDBOX__MEMORY_BYTES", str(2 << 30))
    monkeypatch.setenv("ETUDE_SANDBOX__GRADING__MEMORY_BYTES", str(6 << 30))
    sessions = SandboxSettings().sandbox
    grading = sessions.for_grading()
    assert sessions.memory_bytes == 2 << 30 and grading.memory_bytes == 6 << 30
    assert grading.processes == sessions.processes == 128  # unset in grading: the sessions'
    assert grading.ro_binds == sessions.ro_binds == ("/opt/toolchain",)


def test_the_environment_and_the_reward_service_read_the_same_section(monkeypatch):
    monkeypatch.setenv("ETUDE_SANDBOX__RO_BINDS", '["/opt/toolchain"]')
    assert EnvironmentSettings().sandbox == RewardSettings().sandbox
    assert RewardSettings().sandbox.ro_binds == ("/opt/toolchain",)
