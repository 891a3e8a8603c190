"""The sandbox a Python environment is built in (etude.tasks.pyenv).

Building installs the repository of a task — data from the internet: its `setup.py` or
build backend runs, and so does the code of every package it names. So each step that runs
it (pip, and the environment's own python, whose `.pth` files run at startup) runs in the
sandbox sessions run in (etude.sandbox.bwrap.sandbox_argv: namespaces, seccomp, a non-root
uid even when the service is root, a read-only system with only the interpreter's
directories) under rlimits and a cgroup of its own, and sees nothing of the host but:

- `/workspace`: a scratch copy of the repository (builds write into their source);
- `/build`: scratch for pip (its temporary files, its report);
- the environment's root, writable, at its own path (a virtual environment cannot move);
- `/wheelhouse`, read-only, when packages come from one;
- `/run/etude/index.sock` when they come from an index: the way to the host's proxy
  (etude.tasks.index_proxy), which connects to the index's hosts only. With a wheelhouse
  the sandbox has no network at all.

The environment is then bound read-only into sessions and grading, as before. With the
`process` backend (`ETUDE_SANDBOX__BACKEND=process`, hosts without user namespaces) the
steps run without isolation, as the sessions' commands do there, with a warning.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from etude.sandbox.bwrap import (
    SANDBOX_PATH,
    WORKSPACE,
    Bwrap,
    check_bwrap_works,
    configured_bwrap,
    interpreter_dirs,
    sandbox_argv,
)
from etude.sandbox.config import GIB, SandboxConfig, SandboxSettings
from etude.sandbox.limits import SessionCgroup, limited
from etude.sandbox.output import file_tail
from etude.tasks.testrun import host_cgroups

BUILD_DIR = "/build"
WHEELHOUSE_DIR = "/wheelhouse"
INDEX_SOCKET = "/run/etude/index.sock"
RELAY_SOURCE = Path(__file__).with_name("index_relay.py")
BUILD_CGROUPS = "etude-build-"
"""Prefix of a build's cgroup, `etude-build-<pid>-<random>`, the shape etude.sandbox.reclaim
judges by the pid of the process that made it."""
OUTPUT_TAIL_CHARS = 8000
# A build writes files as large as a wheel's libraries (a few GiB for some), which a
# session's RLIMIT_FSIZE would refuse.
BUILD_FILE_BYTES = 16 * GIB

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BuildPaths:
    """Where one build's directories are: on the host, or as its commands see them."""

    source: str
    """The scratch copy of the repository."""
    scratch: str
    """pip's temporary files and report."""
    root: str
    """The environment being built."""
    wheelhouse: str | None = None
    index_socket: str | None = None
    """The unix socket of the index proxy (etude.tasks.index_proxy)."""


@dataclass(frozen=True, slots=True)
class BuildSandbox:
    bwrap: Bwrap | None
    """None: the `process` backend, no isolation."""
    config: SandboxConfig
    """The sessions' sandbox settings: binds, uid and limits."""

    @classmethod
    def from_settings(cls) -> BuildSandbox:
        """The sandbox of this process's settings (`ETUDE_SANDBOX__*`), as its sessions'."""
        config = SandboxSettings().sandbox
        bwrap = configured_bwrap(config)
        if bwrap is not None:
            check_bwrap_works(bwrap)
        return cls(bwrap, config)

    def seen(self, paths: BuildPaths) -> BuildPaths:
        """`paths` as the build's commands see them."""
        if self.bwrap is None:
            return paths
        return replace(
            paths, source=WORKSPACE, scratch=BUILD_DIR,
            wheelhouse=WHEELHOUSE_DIR if paths.wheelhouse else None,
            index_socket=INDEX_SOCKET if paths.index_socket else None,
        )  # fmt: skip

    def limits(self, timeout_s: float) -> SandboxConfig:
        """A session's limits, but CPU time for the whole build and room for large files."""
        return self.config.model_copy(
            update={
                "cpu_seconds": max(self.config.cpu_seconds, int(timeout_s) + 1),
                "file_size_bytes": max(self.config.file_size_bytes, BUILD_FILE_BYTES),
                "disk_bytes": max(self.config.disk_bytes, BUILD_FILE_BYTES),
            }
        )

    def run(
        self, command: list[str], paths: BuildPaths, timeout_s: float
    ) -> tuple[int | None, str]:
        """Run `command` (written with `seen(paths)`) for a build of `paths`; its exit code
        (None when it ran past `timeout_s` and was killed) and the end of what it said
        (its errors, else its output)."""
        seen = self.seen(paths)
        variables = {
            "HOME": f"{seen.scratch}/home", "TMPDIR": f"{seen.scratch}/tmp",
            # pip's configuration is the build's arguments alone: no pip.conf, no prompt.
            "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1", "PYTHONDONTWRITEBYTECODE": "1",
        }  # fmt: skip
        for name in ("home", "tmp"):
            Path(paths.scratch, name).mkdir(exist_ok=True)
        if seen.index_socket is not None:
            command = [sys.executable, "-I", "-c", RELAY_SOURCE.read_text(),
                       seen.index_socket, *command]  # fmt: skip
        limits = self.limits(timeout_s)
        env = None
        if self.bwrap is None:
            log.warning("building a Python environment without a sandbox (backend `process`)")
            path = ":".join([*(f"{d}/bin" for d in interpreter_dirs()), SANDBOX_PATH])
            env = {"PATH": path, "LANG": "C.UTF-8", **variables}
            argv = command
        else:
            settings = [f"{name}={value}" for name, value in variables.items()]
            argv = sandbox_argv(
                self.bwrap, workspace_args=self._binds(paths), ro_binds=limits.ro_binds,
                info_fd=None, command=["/usr/bin/env", *settings, *command], uid=limits.uid,
                gid=limits.uid, tmp_bytes=limits.tmp_bytes,
            )  # fmt: skip
        name = f"{BUILD_CGROUPS}{os.getpid()}-{secrets.token_hex(6)}"
        cgroup = SessionCgroup(host_cgroups(), name, limits)
        try:
            with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
                process = subprocess.Popen(
                    limited(argv, limits, cgroup), cwd=paths.source if self.bwrap is None else "/",
                    stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                    start_new_session=True, env=env or {"PATH": SANDBOX_PATH},
                )  # fmt: skip
                try:
                    code: int | None = process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    code = None
                cgroup.kill_run(process)
                process.wait()
                said = (
                    file_tail(stderr, OUTPUT_TAIL_CHARS).strip()
                    or file_tail(stdout, OUTPUT_TAIL_CHARS).strip()
                )
        finally:
            cgroup.remove()
        return code, said

    def _binds(self, paths: BuildPaths) -> list[str]:
        binds = [
            "--bind", paths.source, WORKSPACE,
            "--bind", paths.scratch, BUILD_DIR,
            "--bind", paths.root, paths.root,
        ]  # fmt: skip
        if paths.wheelhouse is not None:
            binds += ["--ro-bind", paths.wheelhouse, WHEELHOUSE_DIR]
        if paths.index_socket is not None:
            binds += ["--ro-bind", paths.index_socket, INDEX_SOCKET]
        return binds


@lru_cache(maxsize=1)
def default_build_sandbox() -> BuildSandbox:
    """This process's build sandbox, made once (SandboxUnavailableError when bwrap is
    configured and cannot run here)."""
    return BuildSandbox.from_settings()
