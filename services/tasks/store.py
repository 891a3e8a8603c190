"""The tasks a process knows, by id, read from task files: the reward service grades
them, rollout workers run them."""

from __future__ import annotations

from pathlib import Path

from etude.tasks.task import Task, read_jsonl


class TaskNotFoundError(LookupError):
    pass


class TaskStore:
    def __init__(self, files: tuple[Path, ...]) -> None:
        self.tasks: dict[str, Task] = {}
        for path in files:
            for task in read_jsonl(path):
                self.tasks[task.id] = task

    def get(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise TaskNotFoundError(f"no task {task_id!r} among {len(self.tasks)} known") from None
