"""Where task repositories are built: one answer for the rollout workers and the trainer's
own episodes, since both hand those paths to the same environment service."""

from __future__ import annotations

from etude.common.settings import EtudeSettings, StackSettings
from etude.rollout.config import RolloutServiceConfig, RolloutSettings, task_cache_dir


def test_the_stack_s_run_dir_unless_the_rollout_cache_dir_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv("ETUDE_ROLLOUT__CACHE_DIR", raising=False)
    trainer = EtudeSettings(stack=StackSettings(run_dir=tmp_path))
    assert task_cache_dir(trainer) == tmp_path / "tasks"
    # A cluster's trainer pod is given the shared task volume the workers build on.
    monkeypatch.setenv("ETUDE_ROLLOUT__CACHE_DIR", "/shared/tasks")
    assert str(task_cache_dir(trainer)) == "/shared/tasks"


def test_a_worker_s_own_settings_win_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ETUDE_ROLLOUT__CACHE_DIR", "/shared/tasks")
    worker = RolloutSettings(
        stack=StackSettings(run_dir=tmp_path),
        rollout=RolloutServiceConfig(cache_dir=tmp_path / "cache"),
    )
    assert task_cache_dir(worker) == tmp_path / "cache"
