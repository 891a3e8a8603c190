"""Task repositories on local disk, built once per task and shared by the episodes that
need them (one lock per task, so concurrent episodes of a group build it once)."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

from etude.tasks.materialize import materialize
from etude.tasks.task import Task


class RepositoryCache:
    def __init__(self, cache_dir: Path, projects_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.projects_dir = projects_dir
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()

    def __call__(self, task: Task) -> Path:
        with self._guard:
            lock = self._locks[task.id]
        with lock:
            return materialize(task, self.cache_dir, self.projects_dir)
