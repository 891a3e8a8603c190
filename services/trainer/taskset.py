"""A run's tasks: the training tasks and the held-out ones evaluated for pass@1."""

from __future__ import annotations

from pathlib import Path

from etude.common.run_config import TasksConfig
from etude.tasks.materialize import TASKS_FILE
from etude.tasks.task import Task, read_jsonl

BUNDLED_TASKSETS = {"etude-mini": TASKS_FILE}


def taskset_path(name: str) -> Path:
    path = BUNDLED_TASKSETS.get(name) or Path(name)
    if not path.is_file():
        known = ", ".join(BUNDLED_TASKSETS)
        raise FileNotFoundError(f"no task set {name!r}: a bundled one ({known}) or a JSONL file")
    return path


def load_taskset(config: TasksConfig) -> tuple[list[Task], list[Task]]:
    """(train, held-out), in file order; a task's split comes from its metadata (tasks
    without one train)."""
    tasks = list(read_jsonl(taskset_path(config.taskset)))
    train = [t for t in tasks if t.split == "train"]
    held_out = [t for t in tasks if t.split != "train"]
    if not train:
        raise ValueError(f"task set {config.taskset!r} has no training tasks")
    return train[: config.train_limit], held_out[: config.eval_limit]
