"""Task repositories on local disk, built once per base commit and shared by the episodes
that need them (one lock per repository, so concurrent episodes of a group build it once)."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

from etude.tasks.materialize import materialize, repository_key
from etude.tasks.sources import RepositorySources
from etude.tasks.task import Task


class RepositoryCache:
    def __init__(
        self, cache_dir: Path, projects_dir: Path, sources: RepositorySources | None = None
    ) -> None:
        self.cache_dir = cache_dir
        self.projects_dir = projects_dir
        self.sources = sources
        """Where SWE-bench-style tasks' repositories come from; unset: bundled tasks only."""
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()

    def __call__(self, task: Task) -> Path:
        with self._guard:
            lock = self._locks[repository_key(task)]
        with lock:
            return materialize(task, self.cache_dir, self.projects_dir, sources=self.sources)
