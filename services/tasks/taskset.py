"""A run's tasks: the training tasks and the held-out ones evaluated for pass@1.

Both are drawn across their projects in turn (etude.tasks.draw), in an order fixed by
`tasks.seed`, then cut to `train_limit` / `eval_limit`: a run on 20 tasks trains on every
training project, not on the first one's bugs. A task whose hints cannot show it at the
highest tier the run uses (the start tier, the evaluation tiers) is skipped, and the
skip is logged with its reason; held-out projects stay held out at every tier, since the
split comes from the task's metadata alone.
"""

from __future__ import annotations

import logging
from pathlib import Path

from etude.common.run_config import TasksConfig
from etude.tasks.draw import round_robin
from etude.tasks.hints import hint_problem
from etude.tasks.materialize import BUNDLED_TASKSETS
from etude.tasks.task import Task, read_jsonl

log = logging.getLogger(__name__)


def taskset_path(name: str) -> Path:
    path = BUNDLED_TASKSETS.get(name) or Path(name)
    if not path.is_file():
        known = ", ".join(BUNDLED_TASKSETS)
        raise FileNotFoundError(f"no task set {name!r}: a bundled one ({known}) or a JSONL file")
    return path


def highest_tier(config: TasksConfig) -> int:
    """The most hints any episode of the run is shown: the curriculum only takes hints away."""
    return max((config.hint_tier, *(config.eval_tiers or ())))


def load_taskset(config: TasksConfig) -> tuple[list[Task], list[Task]]:
    """(train, held-out): a task's split comes from its metadata (tasks without one train)."""
    tasks = list(read_jsonl(taskset_path(config.taskset)))
    tier = highest_tier(config)
    problems = {t.id: p for t in tasks if (p := hint_problem(t, tier))}
    if problems:
        shown = "; ".join(list(problems.values())[:5])
        log.warning("skipping %d of %d tasks, not usable at hint tier %d: %s%s", len(problems),
                    len(tasks), tier, shown, " …" if len(problems) > 5 else "")  # fmt: skip
    usable = [t for t in tasks if t.id not in problems]
    train = [t for t in usable if t.split == "train"]
    held_out = [t for t in usable if t.split != "train"]
    if not train:
        why = f" usable at hint tier {tier} (run `etude tasks hints`)" if tier else ""
        raise ValueError(f"task set {config.taskset!r} has no training tasks{why}")
    return (
        round_robin(train, config.seed)[: config.train_limit],
        round_robin(held_out, config.seed)[: config.eval_limit],
    )


def training_tiers(config: TasksConfig) -> tuple[int, ...]:
    """Every tier RL may train at: the start tier, and with a curriculum each tier down to
    its final one (the curriculum moves from more hints to fewer)."""
    if not config.curriculum.enabled:
        return (config.hint_tier,)
    low = min(config.hint_tier, config.curriculum.final_tier)
    return tuple(range(config.hint_tier, low - 1, -1))
