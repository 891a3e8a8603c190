"""A run's tasks: the training tasks and the held-out ones evaluated for pass@1, read from
a task set and registered with the run, where every component reads them.

Reading: `tasks.taskset` names a bundled set (`etude-mini`, …), a SWE-bench-style JSONL
file, a Parquet file (with `pyarrow`) or a Hugging Face `datasets` directory saved with
`save_to_disk` (with `datasets`); one record per task, the fields of etude.tasks.task.

Selecting: both parts are drawn across their projects in turn (etude.tasks.draw), in an
order fixed by `tasks.seed`, then cut to `train_limit` / `eval_limit`: a run on 20 tasks
trains on every training project, not on the first one's bugs. A task whose hints cannot
show it at the highest tier the run uses (the start tier, the evaluation tiers) is skipped,
and the skip is logged with its reason; held-out projects stay held out at every tier, since
the split comes from the task's metadata alone.

Registering: the selected tasks are written to Redis with the run, once (`RunTasks`):

    etude:run:<id>:tasks    hash, task id → the task's SWE-bench record (JSON)
    etude:run:<id>:taskset  JSON {"source", "train": [ids in order], "held_out": [ids],
                                  "provisioning": where repositories and packages come from}

The provisioning (etude.tasks.provisioning: `tasks.sources`, `packages`, `environments` of
the run config) travels with the tasks: a task's record names its repository, not where it
lies, and every part of the run must build it from the same place.

Redis, because every part of a run reaches it wherever it runs (a laptop, Ray actors, a
cluster's pods) and no file system is shared by all of them. The trainer reads the selection
(SFT, evaluation, the orchestrator's cycle), and rollout workers and the reward service look
a task up by the run a request names (`RunTasks.get`, and `RunTasks.provisioning` for where to
build it from; both cached per run), so no service is configured with task files or sources.
A resumed run reads what it registered, even if the file or the config changed.
"""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from etude.common.run_config import TasksConfig
from etude.tasks.draw import round_robin
from etude.tasks.hints import hint_problem
from etude.tasks.materialize import BUNDLED_TASKSETS
from etude.tasks.provisioning import DEFAULT_PROVISIONING, TaskProvisioning
from etude.tasks.store import TaskNotFoundError
from etude.tasks.task import Task, read_jsonl

log = logging.getLogger(__name__)

TASK_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
"""A task id names a directory (its repository, built under the task cache) and a Redis hash
field: no separator, no leading dot or dash (SWE-bench's `owner__repo-123` fits)."""


class TaskSetError(ValueError):
    """A task set that cannot be read: missing, unreadable, or a record that is not a task."""


def taskset_path(name: str) -> Path:
    """The JSONL file of a bundled name or a path (`etude tasks` reads these)."""
    path = BUNDLED_TASKSETS.get(name) or Path(name)
    if not path.is_file():
        known = ", ".join(BUNDLED_TASKSETS)
        raise FileNotFoundError(f"no task set {name!r}: a bundled one ({known}) or a JSONL file")
    return path


def read_tasks(source: str) -> list[Task]:
    """Every task of `source`: a bundled name, a JSONL or Parquet file, or a `datasets`
    directory. TaskSetError says what is wrong."""
    path = BUNDLED_TASKSETS.get(source) or Path(source)
    try:
        if path.is_dir():
            return _from_records(_dataset_rows(path), path)
        if not path.is_file():
            known = ", ".join(BUNDLED_TASKSETS)
            raise TaskSetError(
                f"no task set {source!r}: a bundled one ({known}), a JSONL or Parquet file, or "
                "a Hugging Face datasets directory"
            )
        if path.suffix == ".parquet":
            return _from_records(_parquet_rows(path), path)
        return list(read_jsonl(path))
    except (OSError, UnicodeDecodeError) as error:
        raise TaskSetError(f"cannot read task set {source!r}: {error}") from None
    except TaskSetError:
        raise
    except ValueError as error:  # a record that is not a task (read_jsonl names the line)
        raise TaskSetError(f"task set {source!r}: {error}") from None


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise TaskSetError(
            f"{path} is a Parquet file: reading it needs the `pyarrow` package "
            "(pip install pyarrow), or convert it to JSONL"
        ) from None
    return parquet.read_table(path).to_pylist()


def _dataset_rows(path: Path) -> list[dict[str, Any]]:
    """A directory written by `Dataset.save_to_disk` (or a DatasetDict's: every split)."""
    try:
        import datasets
    except ImportError:
        raise TaskSetError(
            f"{path} is a directory: reading it as a Hugging Face dataset needs the "
            "`datasets` package (pip install datasets), or give a JSONL file"
        ) from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as error:
        raise TaskSetError(f"{path} is not a saved Hugging Face dataset: {error}") from None
    parts = loaded.values() if isinstance(loaded, datasets.DatasetDict) else [loaded]
    return [row for part in parts for row in part]


def _from_records(rows: Iterable[dict[str, Any]], path: Path) -> list[Task]:
    tasks = []
    for number, row in enumerate(rows, 1):
        record = dict(row)
        # Columnar formats often keep the metadata mapping as JSON text.
        if isinstance(record.get("metadata"), str):
            record["metadata"] = json.loads(record["metadata"] or "{}")
        try:
            tasks.append(Task.from_swe(record))
        except (ValueError, KeyError, TypeError) as error:
            raise TaskSetError(f"{path}: row {number}: {error}") from None
    return tasks


def _good_id(task_id: object) -> bool:
    return isinstance(task_id, str) and TASK_ID_PATTERN.fullmatch(task_id) is not None


def highest_tier(config: TasksConfig) -> int:
    """The most hints any episode of the run is shown: the curriculum only takes hints away."""
    return max((config.hint_tier, *(config.eval_tiers or ())))


def select_tasks(tasks: list[Task], config: TasksConfig) -> tuple[list[Task], list[Task]]:
    """(train, held-out) of `tasks`: a task's split comes from its metadata (tasks without
    one train). ValueError when no training task is left."""
    bad = next((t.id for t in tasks if not _good_id(t.id)), None)
    if bad is not None:
        raise TaskSetError(f"task id {bad!r} must match {TASK_ID_PATTERN.pattern}")
    duplicates = len(tasks) - len({t.id for t in tasks})
    if duplicates:
        raise TaskSetError(f"task set {config.taskset!r}: {duplicates} task ids repeat")
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
        raise TaskSetError(f"task set {config.taskset!r} has no training tasks{why}")
    return (
        round_robin(train, config.seed)[: config.train_limit],
        round_robin(held_out, config.seed)[: config.eval_limit],
    )


def load_taskset(config: TasksConfig) -> tuple[list[Task], list[Task]]:
    """(train, held-out) of the task set the config names, read from its file."""
    return select_tasks(read_tasks(config.taskset), config)


def training_tiers(config: TasksConfig) -> tuple[int, ...]:
    """Every tier RL may train at: the start tier, and with a curriculum each tier down to
    its final one (the curriculum moves from more hints to fewer)."""
    if not config.curriculum.enabled:
        return (config.hint_tier,)
    low = min(config.hint_tier, config.curriculum.final_tier)
    return tuple(range(config.hint_tier, low - 1, -1))


# -- registered with the run ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunTaskSet:
    source: str
    """What the tasks were read from (`tasks.taskset`, or the file `etude runs start` sent)."""
    train: list[Task]
    held_out: list[Task]
    provisioning: TaskProvisioning = DEFAULT_PROVISIONING
    """Where the tasks' repositories and packages come from."""


# KEYS: tasks hash, selection key. ARGV: selection JSON, then id/record pairs. Registers
# once: a second registration of the run (a resume, two drivers racing) changes nothing.
_REGISTER = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('SET', KEYS[2], ARGV[1])
return 1
"""


class RunTasks:
    """The task sets registered with runs, in Redis (the client must not decode responses).
    `get` and `provisioning` keep what they have read, per run, for the `runs_cached` runs
    used last: a worker or the reward service asks for the same tasks over and over, and a
    registration never changes."""

    def __init__(self, redis: aioredis.Redis, prefix: str = "etude", runs_cached: int = 8) -> None:
        self.redis = redis
        self.prefix = prefix
        self.runs_cached = runs_cached
        self._register = redis.register_script(_REGISTER)
        self._cache: OrderedDict[str, dict[str, Task]] = OrderedDict()
        self._provisioning: OrderedDict[str, TaskProvisioning] = OrderedDict()

    def _tasks_key(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:tasks"

    def _selection_key(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:taskset"

    async def register(
        self,
        run_id: str,
        source: str,
        train: list[Task],
        held_out: list[Task],
        provisioning: TaskProvisioning = DEFAULT_PROVISIONING,
    ) -> bool:
        """Record the run's tasks and where they are built from; False when the run has a
        task set already (kept)."""
        selection = {"source": source, "train": [t.id for t in train],
                     "held_out": [t.id for t in held_out],
                     "provisioning": provisioning.to_json()}  # fmt: skip
        pairs = [p for t in (*train, *held_out) for p in (t.id, json.dumps(t.to_swe()))]
        keys = [self._tasks_key(run_id), self._selection_key(run_id)]
        return bool(await self._register(keys=keys, args=[json.dumps(selection), *pairs]))

    async def selection(self, run_id: str) -> RunTaskSet | None:
        """The run's registered task set; None when it has none."""
        raw = await self.redis.get(self._selection_key(run_id))
        if raw is None:
            return None
        selection = json.loads(raw)
        ids = [*selection["train"], *selection["held_out"]]
        records = await self.redis.hmget(self._tasks_key(run_id), ids) if ids else []
        missing = [i for i, r in zip(ids, records, strict=True) if r is None]
        if missing:
            raise TaskNotFoundError(f"run {run_id!r}: registered tasks {missing[:3]} are gone")
        tasks = {i: Task.from_swe(json.loads(r)) for i, r in zip(ids, records, strict=True)}
        return RunTaskSet(
            selection["source"],
            [tasks[i] for i in selection["train"]],
            [tasks[i] for i in selection["held_out"]],
            _provisioning_of(run_id, selection),
        )

    async def ensure(
        self, run_id: str, config: TasksConfig, tasks: list[Task] | None = None
    ) -> RunTaskSet:
        """The run's task set: the registered one, else `tasks` (default: read from
        `config.taskset`) selected as `config` says, registered now. TaskSetError when the
        task set cannot be read or leaves nothing to train on."""
        registered = await self.selection(run_id)
        if registered is not None:
            return registered
        train, held_out = select_tasks(
            tasks if tasks is not None else read_tasks(config.taskset), config
        )
        provisioning = TaskProvisioning.from_config(config)
        if not await self.register(run_id, config.taskset, train, held_out, provisioning):
            return await self.selection(run_id)  # another driver registered it first
        log.info("run %s: %d training and %d held-out tasks from %s registered",
                 run_id, len(train), len(held_out), config.taskset)  # fmt: skip
        return RunTaskSet(config.taskset, train, held_out, provisioning)

    async def provisioning(self, run_id: str) -> TaskProvisioning:
        """Where the run's tasks are built from; TaskNotFoundError when the run has no
        registered task set."""
        known = self._provisioning.get(run_id)
        if known is not None:
            self._provisioning.move_to_end(run_id)
            return known
        raw = await self.redis.get(self._selection_key(run_id))
        if raw is None:
            raise TaskNotFoundError(f"run {run_id!r} has no registered task set")
        provisioning = _provisioning_of(run_id, json.loads(raw))
        self._provisioning[run_id] = provisioning
        while len(self._provisioning) > self.runs_cached:
            self._provisioning.popitem(last=False)
        return provisioning

    async def get(self, run_id: str, task_id: str) -> Task:
        """One of the run's tasks; TaskNotFoundError (naming the run) when the run has no
        such task."""
        known = self._cache.get(run_id)
        if known is not None:
            self._cache.move_to_end(run_id)
            if task_id in known:
                return known[task_id]
        raw = await self.redis.hget(self._tasks_key(run_id), task_id)
        if raw is None:
            registered = await self.redis.exists(self._selection_key(run_id))
            raise TaskNotFoundError(
                f"run {run_id!r} has no task {task_id!r}"
                if registered
                else f"run {run_id!r} has no registered task set (no task {task_id!r})"
            )
        task = Task.from_swe(json.loads(raw))
        self._cache.setdefault(run_id, {})[task_id] = task
        self._cache.move_to_end(run_id)
        while len(self._cache) > self.runs_cached:
            self._cache.popitem(last=False)
        return task


def _provisioning_of(run_id: str, selection: dict[str, Any]) -> TaskProvisioning:
    """A registration's provisioning; one written before runs had any: the defaults."""
    document = selection.get("provisioning")
    if document is None:
        return DEFAULT_PROVISIONING
    try:
        return TaskProvisioning.from_json(document)
    except ValueError as error:
        raise TaskSetError(f"run {run_id!r}: its registered task set: {error}") from None
