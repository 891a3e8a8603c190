"""How `POST /runs` starts a run once it is recorded.

`LocalLauncher` spawns `etude train` on the gateway's machine (the local stack);
`RecordOnlyLauncher` leaves the run queued in Redis for a controller elsewhere (a RayJob on
a cluster) to pick up. Either way the training loop reports its progress to the registry.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import yaml

from etude.common.run_config import RunConfig
from etude.common.runs import RunRecord

DEFAULT_ARGV_PREFIX = (sys.executable, "-m", "etude.cli")


class Launcher(Protocol):
    async def launch(self, record: RunRecord, config: RunConfig) -> None:
        """Start the run `record` (already recorded as queued); raise if it cannot start."""
        ...

    def exited(self) -> dict[str, int]:
        """Runs whose started process has exited since the last call, with exit codes."""
        ...

    def log_of(self, run_id: str) -> str:
        """Where the run's process wrote its output."""
        ...


class RecordOnlyLauncher:
    """Starts nothing: the queued record is the hand-off."""

    async def launch(self, record: RunRecord, config: RunConfig) -> None:
        return None

    def exited(self) -> dict[str, int]:
        return {}

    def log_of(self, run_id: str) -> str:
        return "the log of whatever runs it"


class LocalLauncher:
    """Writes the config to `<run_dir>/gateway/<run id>.yaml` and starts
    `<argv_prefix> train <that file> --run-id <id>` with its output in `<run id>.log` beside
    it. The child runs in a session of its own, so it outlives a restarted gateway and a
    Ctrl-C in the gateway's terminal does not reach it. `argv_prefix` is the command that
    provides `train` (the `etude` CLI; a test passes something harmless). The child gets the
    gateway's environment with `env` on top: the Redis to report to, and ports of its own
    rather than the ones the gateway is bound to."""

    def __init__(
        self,
        run_dir: Path,
        argv_prefix: Sequence[str] = DEFAULT_ARGV_PREFIX,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = run_dir / "gateway"
        self.argv_prefix = tuple(argv_prefix)
        self.env = {**os.environ, **(env or {})}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        # `launch` adds from a worker thread while the reaper reads on the event loop: a
        # dict changing size under iteration would raise in the reaper.
        self._processes_lock = threading.Lock()

    async def launch(self, record: RunRecord, config: RunConfig) -> None:
        await asyncio.to_thread(self._spawn, record.run_id, config)

    def exited(self) -> dict[str, int]:
        """Collects the children that have exited (none stays a zombie): the gateway's reaper
        ends their runs if they did not."""
        with self._processes_lock:
            done = {k: p.returncode for k, p in self.processes.items() if p.poll() is not None}
            for run_id in done:
                del self.processes[run_id]
        return done

    def log_of(self, run_id: str) -> str:
        return str(self.directory / f"{run_id}.log")

    def _spawn(self, run_id: str, config: RunConfig) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        config_path = self.directory / f"{run_id}.yaml"
        document = config.model_dump(mode="json")
        config_path.write_text(yaml.safe_dump(document, sort_keys=False))
        argv = [*self.argv_prefix, "train", str(config_path), "--run-id", run_id]
        with open(self.directory / f"{run_id}.log", "ab") as log:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        with self._processes_lock:
            self.processes[run_id] = process
