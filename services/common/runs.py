"""The run registry: one record per training run in Redis, written by the gateway (create,
stop) and by the training loop (status, step, policy version, metrics), read by both.

Keys, for a prefix `P`: `P:run:<id>` is a hash (scalar fields as strings, `config` as JSON,
each metric as its own field `metric:<name>`), `P:runs` a sorted set of ids scored by
creation time. A metric per field means two writers reporting different metrics never
overwrite each other's, and every update sets only the fields it changes. The status rules
(a terminal status is final; a run asked to stop stays `stopping` until it ends) are checked
and applied in one Lua script, so a trainer's `running` cannot undo a concurrent stop.

Only Redis 6.2 commands are used; the client must not decode responses (the queue shares it).
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis.asyncio as aioredis

from etude.common.run_config import RunConfig

RUN_STATUSES = ("queued", "running", "stopping", "stopped", "finished", "failed")
TERMINAL = frozenset({"stopped", "finished", "failed"})
# Ids end up in Redis keys, file names and argv: no separators, no leading dash.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_METRIC = "metric:"

# KEYS: run hash, runs index. ARGV: id, created_ms, field/value pairs.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
"""

# KEYS: run hash. ARGV: status ('' keeps it), stop ('1' requests a stop), updated_ms,
# field/value pairs. Returns 'missing', 'final:<status>' (refused), or 'ok'.
_UPDATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
local terminal = {stopped = true, finished = true, failed = true}
local current = redis.call('HGET', KEYS[1], 'status')
local status = ARGV[1]
if ARGV[2] == '1' then
  if terminal[current] then return 'ok' end
  redis.call('HSET', KEYS[1], 'stop_requested', '1')
  status = 'stopping'
end
if status ~= '' then
  if terminal[current] and not terminal[status] then return 'final:' .. current end
  local stopping = redis.call('HGET', KEYS[1], 'stop_requested') == '1'
  if stopping and (status == 'queued' or status == 'running') then status = 'stopping' end
  redis.call('HSET', KEYS[1], 'status', status)
end
redis.call('HSET', KEYS[1], 'updated_ms', ARGV[3])
if #ARGV > 3 then redis.call('HSET', KEYS[1], unpack(ARGV, 4)) end
return 'ok'
"""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    name: str
    config: dict
    status: str
    created_ms: int
    updated_ms: int
    step: int = 0
    policy_version: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    """Latest value of each scalar metric the training loop reported."""
    error: str = ""
    stop_requested: bool = False
    output_dir: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: a NaN or infinite metric (a diverged loss) becomes None, which JSON
        can carry."""
        record = asdict(self)
        record["metrics"] = {k: v if math.isfinite(v) else None for k, v in self.metrics.items()}
        return record

    @classmethod
    def from_hash(cls, fields: dict[bytes, bytes]) -> RunRecord:
        text = {k.decode(): v.decode() for k, v in fields.items()}
        metrics = {
            k.removeprefix(_METRIC): float(v) for k, v in text.items() if k.startswith(_METRIC)
        }
        return cls(
            run_id=text["run_id"],
            name=text.get("name", ""),
            config=json.loads(text.get("config", "{}")),
            status=text["status"],
            created_ms=int(text.get("created_ms", 0)),
            updated_ms=int(text.get("updated_ms", 0)),
            step=int(text.get("step", 0)),
            policy_version=int(text.get("policy_version", 0)),
            metrics=dict(sorted(metrics.items())),
            error=text.get("error", ""),
            stop_requested=text.get("stop_requested") == "1",
            output_dir=text.get("output_dir", ""),
        )


class RunNotFoundError(LookupError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r}")
        self.run_id = run_id


class RunRegistry:
    def __init__(self, redis: aioredis.Redis, prefix: str = "etude") -> None:
        if redis.get_connection_kwargs().get("decode_responses"):
            raise ValueError("RunRegistry needs a Redis client with decode_responses=False")
        self.redis = redis
        self.prefix = prefix
        self._create = redis.register_script(_CREATE)
        self._update = redis.register_script(_UPDATE)

    def _key(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}"

    @property
    def _index(self) -> str:
        return f"{self.prefix}:runs"

    async def create(self, config: RunConfig, run_id: str | None = None) -> RunRecord:
        """Record a new run as `queued`. Without `run_id`: `<name>-<8 random hex digits>`.
        ValueError when the id is taken or not of RUN_ID_PATTERN."""
        if run_id is not None and not re.fullmatch(RUN_ID_PATTERN, run_id):
            raise ValueError(f"run id {run_id!r} must match {RUN_ID_PATTERN}")
        # A generated id colliding is unlikely, not impossible: draw again.
        for _attempt in range(5):
            candidate = run_id or f"{config.name}-{secrets.token_hex(4)}"
            now = _now_ms()
            record = RunRecord(
                candidate, config.name, config.model_dump(mode="json"), "queued", now, now
            )
            fields = {
                "run_id": record.run_id,
                "name": record.name,
                "config": json.dumps(record.config, sort_keys=True),
                "status": record.status,
                "created_ms": now,
                "updated_ms": now,
                "step": 0,
                "policy_version": 0,
                "error": "",
                "stop_requested": "0",
                "output_dir": "",
            }
            pairs = [str(part) for item in fields.items() for part in item]
            keys = [self._key(candidate), self._index]
            if await self._create(keys=keys, args=[candidate, now, *pairs]):
                return record
            if run_id is not None:
                break
        raise ValueError(f"run {candidate!r} already exists")

    async def get(self, run_id: str) -> RunRecord:
        fields = await self.redis.hgetall(self._key(run_id))
        if not fields:
            raise RunNotFoundError(run_id)
        return RunRecord.from_hash(fields)

    async def list(self, limit: int = 100) -> list[RunRecord]:
        """The newest `limit` runs, newest first."""
        ids = await self.redis.zrevrange(self._index, 0, max(limit, 1) - 1)
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in ids:
                pipe.hgetall(self._key(run_id.decode()))
            hashes = await pipe.execute()
        return [RunRecord.from_hash(fields) for fields in hashes if fields]

    async def update(
        self,
        run_id: str,
        *,
        status: str | None = None,
        step: int | None = None,
        policy_version: int | None = None,
        metrics: dict[str, float] | None = None,
        error: str | None = None,
        output_dir: str | None = None,
    ) -> RunRecord:
        """Set the given fields; metrics are merged with those already recorded. A run
        whose stop was requested reports `stopping` even when told `queued` or `running`.
        ValueError on an unknown status or a terminal status changed to a non-terminal one."""
        if status is not None and status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; one of {', '.join(RUN_STATUSES)}")
        fields: dict[str, str] = {}
        for name, value in (("step", step), ("policy_version", policy_version),
                            ("error", error), ("output_dir", output_dir)):  # fmt: skip
            if value is not None:
                fields[name] = str(value)
        for name, value in (metrics or {}).items():
            fields[f"{_METRIC}{name}"] = repr(float(value))
        await self._apply(run_id, status or "", stop=False, fields=fields)
        return await self.get(run_id)

    async def request_stop(self, run_id: str) -> RunRecord:
        """Ask the run to stop: `stop_requested` and status `stopping`. A run that already
        ended is left as it is (the caller sees its terminal status)."""
        await self._apply(run_id, "", stop=True, fields={})
        return await self.get(run_id)

    async def reopen(self, run_id: str) -> RunRecord:
        """A run resumed from its checkpoint (`etude train --resume`) runs again, whatever
        it ended as: status `running`, no stop request, no error. The one way out of a
        terminal status, taken only by the process that continues the run."""
        key = self._key(run_id)
        if not await self.redis.exists(key):
            raise RunNotFoundError(run_id)
        await self.redis.hset(key, mapping={
            "status": "running", "stop_requested": "0", "error": "", "updated_ms": str(_now_ms()),
        })  # fmt: skip
        return await self.get(run_id)

    async def stop_requested(self, run_id: str) -> bool:
        value = await self.redis.hget(self._key(run_id), "stop_requested")
        if value is None:
            raise RunNotFoundError(run_id)
        return value == b"1"

    async def _apply(self, run_id: str, status: str, *, stop: bool, fields: dict[str, str]) -> None:
        pairs = [part for item in fields.items() for part in item]
        args = [status, "1" if stop else "0", str(_now_ms()), *pairs]
        outcome = (await self._update(keys=[self._key(run_id)], args=args)).decode()
        if outcome == "missing":
            raise RunNotFoundError(run_id)
        if outcome.startswith("final:"):
            current = outcome.removeprefix("final:")
            raise ValueError(f"run {run_id!r} has ended ({current}); it cannot become {status}")
