"""The run registry: one record per training run in Redis, written by the gateway (create,
stop) and by the training loop (status, step, policy version, metrics), read by both.

Keys, for a prefix `P`: `P:run:<id>` is a hash (scalar fields as strings, `config` as JSON,
each metric as its own field `metric:<name>`), `P:runs` a sorted set of ids scored by
creation time, `P:runs:active` the set of runs not yet ended. A metric per field means two
writers reporting different metrics never overwrite each other's, and every update sets only
the fields it changes. The status rules (a terminal status is final; a run asked to stop
stays `stopping` until it ends; a queued run no driver has taken stops at once) are checked
and applied in one Lua script, so a trainer's `running` cannot undo a concurrent stop.

A run ends even when nothing is left to end it: its driver writes `heartbeat_ms` every few
seconds (`heartbeat`), and `reap` marks an active run whose heartbeat is older than a bound
`failed` — or `stopped`, when a stop was requested — with the reason in `error`. The gateway
reaps (etude.gateway.app), so `etude runs show` never shows a dead run as `running`.

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

# KEYS: run hash, runs index, active set. ARGV: id, created_ms, field/value pairs.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
return 1
"""

# KEYS: run hash, active set. ARGV: status ('' keeps it), stop ('1' requests a stop),
# updated_ms, run id, field/value pairs. Returns 'missing', 'final:<status>' (refused), or
# 'ok'. A stop of a run still queued with no driver's heartbeat ends it at once: no driver
# is there to see the request (a launcher that starts one later finds it ended).
_UPDATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
local terminal = {stopped = true, finished = true, failed = true}
local current = redis.call('HGET', KEYS[1], 'status')
local status = ARGV[1]
if ARGV[2] == '1' then
  if terminal[current] then return 'ok' end
  redis.call('HSET', KEYS[1], 'stop_requested', '1')
  status = 'stopping'
  if current == 'queued' and not redis.call('HGET', KEYS[1], 'heartbeat_ms') then
    status = 'stopped'
  end
end
if status ~= '' then
  if terminal[current] and not terminal[status] then return 'final:' .. current end
  local stopping = redis.call('HGET', KEYS[1], 'stop_requested') == '1'
  if stopping and (status == 'queued' or status == 'running') then status = 'stopping' end
  redis.call('HSET', KEYS[1], 'status', status)
  if terminal[status] then redis.call('SREM', KEYS[2], ARGV[4]) end
end
redis.call('HSET', KEYS[1], 'updated_ms', ARGV[3])
if #ARGV > 4 then redis.call('HSET', KEYS[1], unpack(ARGV, 5)) end
return 'ok'
"""

# KEYS: run hash, active set. ARGV: now_ms, bound_ms, reason, run id. Ends a running or
# stopping run whose driver's heartbeat (else its last update) is older than the bound, or
# with bound -1 any run not ended yet; returns the status it ended with, or ''.
_REAP = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then redis.call('SREM', KEYS[2], ARGV[4]) return '' end
local terminal = {stopped = true, finished = true, failed = true}
if terminal[status] then redis.call('SREM', KEYS[2], ARGV[4]) return '' end
if ARGV[2] ~= '-1' then
  if status ~= 'running' and status ~= 'stopping' then return '' end
  local beat = redis.call('HGET', KEYS[1], 'heartbeat_ms')
  beat = tonumber(beat or redis.call('HGET', KEYS[1], 'updated_ms') or '0')
  if tonumber(ARGV[1]) - beat <= tonumber(ARGV[2]) then return '' end
end
local ending = 'failed'
if redis.call('HGET', KEYS[1], 'stop_requested') == '1' then ending = 'stopped' end
redis.call('HSET', KEYS[1], 'status', ending, 'error', ARGV[3], 'updated_ms', ARGV[1])
redis.call('SREM', KEYS[2], ARGV[4])
return ending
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
    heartbeat_ms: int = 0
    """When the run's driver last said it is alive (0: no driver yet)."""
    progress: str = ""
    """What the run is doing now, in a line (`SFT step 37/150: loss 0.412, ETA 9 min`)."""

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
            heartbeat_ms=int(text.get("heartbeat_ms", 0)),
            progress=text.get("progress", ""),
        )


class RunNotFoundError(LookupError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r}")
        self.run_id = run_id


class RunFailedError(RuntimeError):
    """The run was failed elsewhere (a rollout worker that could not find or build a task,
    the reaper): its driver stops, leaving the recorded reason as it is."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"run {run_id!r} failed: {reason}")
        self.reason = reason


class RunRegistry:
    def __init__(self, redis: aioredis.Redis, prefix: str = "etude") -> None:
        if redis.get_connection_kwargs().get("decode_responses"):
            raise ValueError("RunRegistry needs a Redis client with decode_responses=False")
        self.redis = redis
        self.prefix = prefix
        self._create = redis.register_script(_CREATE)
        self._update = redis.register_script(_UPDATE)
        self._reap = redis.register_script(_REAP)

    def _key(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}"

    @property
    def _index(self) -> str:
        return f"{self.prefix}:runs"

    @property
    def _active(self) -> str:
        return f"{self.prefix}:runs:active"

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
            keys = [self._key(candidate), self._index, self._active]
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

    async def is_alive(self, run_id: str, max_silence_seconds: float) -> bool:
        """The run has not ended and its driver (else its last update) spoke within
        `max_silence_seconds`: what the reaper would leave alone. An unknown run is not."""
        try:
            record = await self.get(run_id)
        except RunNotFoundError:
            return False
        if record.status in TERMINAL:
            return False
        last = record.heartbeat_ms or record.updated_ms
        return _now_ms() - last <= max_silence_seconds * 1000

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
        progress: str | None = None,
    ) -> RunRecord:
        """Set the given fields; metrics are merged with those already recorded. A run
        whose stop was requested reports `stopping` even when told `queued` or `running`.
        ValueError on an unknown status or a terminal status changed to a non-terminal one."""
        if status is not None and status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; one of {', '.join(RUN_STATUSES)}")
        fields: dict[str, str] = {}
        for name, value in (("step", step), ("policy_version", policy_version),
                            ("error", error), ("output_dir", output_dir),
                            ("progress", progress)):  # fmt: skip
            if value is not None:
                fields[name] = str(value)
        for name, value in (metrics or {}).items():
            fields[f"{_METRIC}{name}"] = repr(float(value))
        await self._apply(run_id, status or "", stop=False, fields=fields)
        return await self.get(run_id)

    async def request_stop(self, run_id: str) -> RunRecord:
        """Ask the run to stop: `stop_requested` and status `stopping` (`stopped` at once for
        a queued run no driver has taken yet). A run that already ended is left as it is (the
        caller sees its terminal status)."""
        await self._apply(run_id, "", stop=True, fields={})
        return await self.get(run_id)

    async def reopen(self, run_id: str) -> RunRecord:
        """A run resumed from its checkpoint (`etude train --resume`) runs again, whatever
        it ended as: status `running`, no stop request, no error. The one way out of a
        terminal status, taken only by the process that continues the run."""
        key = self._key(run_id)
        if not await self.redis.exists(key):
            raise RunNotFoundError(run_id)
        now = str(_now_ms())
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={
                "status": "running", "stop_requested": "0", "error": "", "updated_ms": now,
                "heartbeat_ms": now,
            })  # fmt: skip
            pipe.sadd(self._active, run_id)
            await pipe.execute()
        return await self.get(run_id)

    async def heartbeat(self, run_id: str) -> None:
        """The driver is alive (see `reap`)."""
        await self.redis.hset(self._key(run_id), "heartbeat_ms", str(_now_ms()))

    async def should_stop(self, run_id: str) -> bool:
        """What a training loop asks between steps and while it waits: True when a stop was
        requested (or the run was ended as stopped); RunFailedError when the run was failed
        elsewhere, with the recorded reason."""
        status, stop, error = await self.redis.hmget(
            self._key(run_id), ["status", "stop_requested", "error"]
        )
        if status is None:
            raise RunNotFoundError(run_id)
        if status == b"failed":
            raise RunFailedError(run_id, (error or b"").decode() or "no reason recorded")
        return stop == b"1" or status in (b"stopped", b"finished")

    async def reap(self, max_silence_seconds: float, run_id: str | None = None) -> dict[str, str]:
        """End the active runs (or just `run_id`) whose driver has not written a heartbeat
        for `max_silence_seconds`: `stopped` when a stop was requested, else `failed`, with
        the reason in `error`. Returns {run id: the status it ended with}."""
        ids = [run_id] if run_id else [i.decode() for i in await self.redis.smembers(self._active)]
        reason = (
            f"no heartbeat from the run's driver for over {max_silence_seconds:g} s: "
            "the trainer process died or lost Redis"
        )
        ended = {}
        for each in ids:
            if outcome := await self._end(each, int(max_silence_seconds * 1000), reason):
                ended[each] = outcome
        return ended

    async def abandon(self, run_id: str, reason: str) -> str:
        """End a run that has not ended, whatever its status, because nothing will drive it
        any more (its launched process exited): `stopped` when a stop was requested, else
        `failed`. Returns that status, or '' when it had ended already."""
        return await self._end(run_id, -1, reason)

    async def _end(self, run_id: str, bound_ms: int, reason: str) -> str:
        keys = [self._key(run_id), self._active]
        return (await self._reap(keys=keys, args=[_now_ms(), bound_ms, reason, run_id])).decode()

    async def stop_requested(self, run_id: str) -> bool:
        value = await self.redis.hget(self._key(run_id), "stop_requested")
        if value is None:
            raise RunNotFoundError(run_id)
        return value == b"1"

    async def _apply(self, run_id: str, status: str, *, stop: bool, fields: dict[str, str]) -> None:
        pairs = [part for item in fields.items() for part in item]
        args = [status, "1" if stop else "0", str(_now_ms()), run_id, *pairs]
        keys = [self._key(run_id), self._active]
        outcome = (await self._update(keys=keys, args=args)).decode()
        if outcome == "missing":
            raise RunNotFoundError(run_id)
        if outcome.startswith("final:"):
            current = outcome.removeprefix("final:")
            raise ValueError(f"run {run_id!r} has ended ({current}); it cannot become {status}")
