"""Resource limits of a sandbox: rlimits on every process, and a cgroup per session.

Rlimits are set in the child between fork and exec, so they hold from the first
instruction and every descendant inherits them. The cgroup (memory + pids) is joined the
same way, before exec, so no process of the sandbox ever runs outside it. Cgroups are
used where the tree is writable (cgroup v2, or v1 `memory` and `pids` hierarchies);
elsewhere the rlimits alone apply, which a root-owned sandbox can outrun with a fork bomb:
the kernel exempts the root user from RLIMIT_NPROC, and the sandbox's uid maps to the
service's, so a user namespace does not help. There the sandbox's watcher kills the
command when its processes reach the limit. `CgroupSupport.describe()` says which case
holds. One file is never larger than the disk quota (RLIMIT_FSIZE).

Cgroups outlive the process that made them, and without them so can what the `process`
backend started: `etude.sandbox.reclaim` finds both after a crash. Without a cgroup, the
process that becomes the sandbox records its pid and start time for that, in
`CgroupSupport.records`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from etude.sandbox.config import SandboxConfig
from etude.sandbox.procs import descendants
from etude.sandbox.procs import kill_all as kill_pids

CGROUP_ROOT = Path("/sys/fs/cgroup")
RECORD_SUFFIX = ".pids"


def limited(argv: list[str], config: SandboxConfig, cgroup: SessionCgroup) -> list[str]:
    """`argv` behind a bash that joins the session's cgroup and sets the rlimits, then
    `exec`s it, so the limits hold from the sandbox's first instruction.

    Why not `preexec_fn`: Python code between fork and exec can crash in a process that
    runs gRPC threads (the child inherits their locks); a plain exec chain cannot.
    """
    steps = [f"echo $$ > {_quote(str(d / 'cgroup.procs'))}" for d in cgroup.dirs]
    if cgroup.record is not None:
        # Best effort: the record only serves cleaning up after a crash, and must never
        # keep a sandbox from starting. bash's own command name has no spaces, so the
        # start time is the 22nd field of its stat line.
        steps.append(
            '{ read -ra s < /proc/$$/stat && echo "$$ ${s[21]}" >> '
            f"{_quote(str(cgroup.record))} || true; }} 2>/dev/null"
        )
    steps.append(
        "ulimit"
        f" -t {config.cpu_seconds}"
        f" -v {config.address_space_bytes // 1024}"
        f" -f {min(config.file_size_bytes, config.disk_bytes) // 1024}"
        f" -n {config.open_files}"
        f" -u {config.processes}"
        " -c 0"
    )
    script = " && ".join([*steps, 'exec "$@"'])
    return ["/bin/bash", "-c", script, "etude-sandbox", *argv]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _own_cgroup_path(controller: str) -> str:
    """This process's cgroup within `controller`'s hierarchy ("" for v2's unified one)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        if controllers.split(",") == [controller] or (controller == "" and controllers == ""):
            return path.lstrip("/")
    return ""


@dataclass(frozen=True, slots=True)
class CgroupSupport:
    """Where session cgroups are made: one parent directory per controller."""

    version: int  # 0 = none, 1 or 2
    parents: dict[str, Path]
    records: Path | None = None
    """Without cgroups: where each sandbox records the processes it starts (a directory
    `etude.sandbox.reclaim` looks in once this process is gone); None: no record."""

    def describe(self) -> str:
        if self.version == 0:
            return "no writable cgroup tree: rlimits only"
        return f"cgroup v{self.version} (memory + pids per session)"

    @classmethod
    def detect(cls) -> CgroupSupport:
        unified = CGROUP_ROOT / "cgroup.controllers"
        if unified.exists():
            parent = CGROUP_ROOT / _own_cgroup_path("")
            wanted = {"memory", "pids"}
            if wanted <= set(unified.read_text().split()) and _writable(parent):
                return cls(2, {"unified": parent})
            return cls(0, {})
        parents = {c: CGROUP_ROOT / c / _own_cgroup_path(c) for c in ("memory", "pids")}
        if all(_writable(p) for p in parents.values()):
            return cls(1, parents)
        return cls(0, {})


def _writable(directory: Path) -> bool:
    probe = directory / f"etude-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    probe.rmdir()
    return True


def cgroup_pids(directory: Path) -> list[int]:
    """The processes in the cgroup `directory`; none if it is gone."""
    try:
        return [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return []


class SessionCgroup:
    """The cgroup(s) of one session's sandbox."""

    def __init__(self, support: CgroupSupport, name: str, config: SandboxConfig) -> None:
        self.dirs: list[Path] = []
        self.record: Path | None = None
        if support.version == 0 and support.records is not None:
            self.record = support.records / f"{name}{RECORD_SUFFIX}"
        if support.version == 2:
            d = support.parents["unified"] / name
            d.mkdir(exist_ok=True)
            (d / "memory.max").write_text(str(config.memory_bytes))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")  # the limit must not spill to swap
            (d / "pids.max").write_text(str(config.processes))
            self.dirs = [d]
        elif support.version == 1:
            memory = support.parents["memory"] / name
            pids = support.parents["pids"] / name
            memory.mkdir(exist_ok=True)
            pids.mkdir(exist_ok=True)
            (memory / "memory.limit_in_bytes").write_text(str(config.memory_bytes))
            (pids / "pids.max").write_text(str(config.processes))
            self.dirs = [memory, pids]

    def pids(self) -> list[int]:
        return cgroup_pids(self.dirs[-1]) if self.dirs else []

    def oom_killed(self) -> bool:
        """Whether the memory limit killed a process of this session."""
        for d in self.dirs:
            for name in ("memory.events", "memory.oom_control"):  # v2, v1
                with contextlib.suppress(OSError):
                    for line in (d / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill" and int(value) > 0:
                            return True
        return False

    def kill_all(self, timeout: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def kill_run(self, process: subprocess.Popen) -> None:
        """Every process of a one-off run started as `process` in this cgroup: the cgroup's
        (stopped first, so a fork bomb cannot refill freed slots), else its process tree."""
        if self.dirs:
            kill_pids(self.pids)
        else:
            kill_pids(lambda: [process.pid, *descendants(process.pid)] if process.poll() is None
                      else descendants(process.pid))  # fmt: skip
        with contextlib.suppress(ProcessLookupError):
            process.kill()

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                d.rmdir()
        self.dirs = []
        if self.record is not None:
            self.record.unlink(missing_ok=True)
