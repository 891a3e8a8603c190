"""Settings of the environment service (`ETUDE_ENVIRONMENT__*`; its sandboxes' own are
`ETUDE_SANDBOX__*`, see `etude.sandbox.config`; the `sim` backend's `ETUDE_SIM__*`, see
`etude.sim.config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from etude.common.settings import Section
from etude.sandbox.config import SandboxSettings
from etude.sim.config import SimConfig
from etude.tasks.materialize import PROJECTS_DIR
from etude.tasks.provisioning import SHARED_TASKS_DIR

SESSIONS_DIR = "sessions"
"""Under `root_dir`: the session layers, one directory per service process that made them
(etude.environment.workspace); what a killed service left there is reclaimed at start."""
SESSION_CGROUPS = "etude-se-"
"""Name prefix of the sessions' cgroups: `etude-<session id>@<owning process>`."""


class EnvironmentConfig(Section):
    backend: Literal["sandbox", "sim"] = "sandbox"
    """`sandbox`: sessions on real workspaces, tools run in sandboxes (`ETUDE_SANDBOX__*`).
    `sim`: no workspace, tool calls cost simulated time (etude.environment.sim;
    `ETUDE_SIM__*`); a session's repository and idle TTL are checked as for `sandbox`
    (`repository_roots`, `max_idle_ttl_seconds`)."""
    workspace_mode: Literal["auto", "overlay", "copy"] = "auto"
    """`overlay`: a copy-on-write layer over the read-only base (bwrap ≥ 0.11); `copy`: a
    full copy per session; `auto`: overlay where it works, else copy."""
    root_dir: Path | None = None
    """Where bases, session layers and snapshots live; unset: `<stack run dir>/environment`."""
    max_sessions: int = Field(default=64, ge=1)
    """Live sessions allowed at once; one more gets RESOURCE_EXHAUSTED."""
    repository_roots: tuple[Path, ...] = ()
    """Directories a session's repository must lie under (symlinks resolved), the task
    store where repositories are materialized; unset: `<stack run dir>/tasks`, the bundled
    projects and `/shared/tasks` (the chart's shared task volume). The environment's own
    `root_dir` (bases, other sessions' layers) is never allowed."""
    idle_ttl_seconds: float = Field(default=1800.0, gt=0, allow_inf_nan=False)
    """A session unused this long is closed."""
    max_idle_ttl_seconds: float = Field(default=86_400.0, gt=0, allow_inf_nan=False)
    """Longest idle time-to-live a CreateSession may ask for; more is INVALID_ARGUMENT."""
    default_timeout_seconds: float = Field(default=60.0, gt=0)
    """Timeout of a command when the call gives none."""
    max_timeout_seconds: float = Field(default=600.0, gt=0)
    """Longest timeout a call may ask for."""
    search_address: str | None = None
    """`host:port` of the search service for `codebase_search`; unset:
    `ETUDE_SERVICES__SEARCH`, and without either the tool reports that search is
    unavailable."""


class EnvironmentSettings(SandboxSettings):
    environment: EnvironmentConfig = EnvironmentConfig()
    sim: SimConfig = SimConfig()

    def resolved(self) -> EnvironmentConfig:
        """The environment section with its defaults that depend on other sections filled."""
        return self.environment.model_copy(
            update={
                "root_dir": self.environment.root_dir or self.stack.run_dir / "environment",
                "repository_roots": self.environment.repository_roots
                or (self.stack.run_dir / "tasks", PROJECTS_DIR, SHARED_TASKS_DIR),
                "search_address": self.environment.search_address or self.services.search,
            }
        )
