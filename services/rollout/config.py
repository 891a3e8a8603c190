"""Settings of a rollout worker (`ETUDE_ROLLOUT__*`). What an episode may do (turns, tokens,
sampling) is the run's configuration, read from the run registry, and its tasks are the task
set registered with the run (etude.tasks.taskset), not set here."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from etude.common.settings import EtudeSettings, Section
from etude.tasks.materialize import PROJECTS_DIR


class RolloutServiceConfig(Section):
    run_id: str = ""
    """The run whose rollouts this worker takes; its configuration comes from the run
    registry in Redis (written by `etude train` or the gateway)."""
    consumer: str = ""
    """This worker's name in the rollout consumer group; unset: `<hostname>-<pid>`."""
    projects_dir: Path = PROJECTS_DIR
    """Where the projects of `etude-mini/<name>` tasks live."""
    cache_dir: Path | None = None
    """Where task repositories are built; unset: `<stack run dir>/tasks`."""
    concurrency: int | None = Field(default=None, ge=1)
    """Episodes at once; unset: the run's `rollout.concurrency`."""
    heartbeat_seconds: float = Field(default=5.0, gt=0)
    """How often a running rollout's entry is marked alive; keep it well under
    ETUDE_QUEUE__CLAIM_IDLE_SECONDS."""


class RolloutSettings(EtudeSettings):
    rollout: RolloutServiceConfig = RolloutServiceConfig()


def task_cache_dir(settings: EtudeSettings) -> Path:
    """Where this process builds task repositories and Python environments: the rollout
    workers, and the trainer's own episodes (SFT demonstrations, evaluation), which hand the
    same paths to the environment service. `ETUDE_ROLLOUT__CACHE_DIR` (on a cluster the
    shared task volume, which the environment's pods see too), else `<stack run dir>/tasks`."""
    own = settings if isinstance(settings, RolloutSettings) else RolloutSettings()
    return own.rollout.cache_dir or settings.stack.run_dir / "tasks"
