"""Bounded caches sharing one interface: LRU, LFU (LRU among equals) and TTL.

The caches are not thread-safe; guard them with a lock if they are shared between threads.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from .stats import CacheStats

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MISSING: Any = object()
"""Sentinel for "no entry", so that ``None`` can be cached like any other value."""

EvictCallback = Callable[[Any, Any], None]


def _check_capacity(capacity: int) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise TypeError(f"capacity must be an int, got {type(capacity).__name__}")
    if capacity < 1:
        raise ValueError(f"capacity must be at least 1, got {capacity}")
    return capacity


class Cache(ABC, Generic[K, V]):
    """Common behaviour: statistics, eviction callbacks, resizing and ``get_or_compute``."""

    def __init__(self, capacity: int, on_evict: EvictCallback | None = None) -> None:
        self.capacity = _check_capacity(capacity)
        self.stats = CacheStats()
        self._on_evict = on_evict

    def get(self, key: K, default: Any = None) -> Any:
        """Return the cached value (counting a hit) or ``default`` (counting a miss)."""
        value = self._lookup(key)
        if value is MISSING:
            self.stats.misses += 1
            return default
        self.stats.hits += 1
        return value

    def get_or_compute(self, key: K, factory: Callable[[], V]) -> V:
        """Return the cached value, or call ``factory`` once and cache its result."""
        value = self.get(key, MISSING)
        if value is MISSING:
            value = factory()
            self.put(key, value)
        return value

    def resize(self, capacity: int) -> None:
        """Change the capacity, evicting entries in eviction order if it shrinks."""
        self.capacity = _check_capacity(capacity)
        while len(self) > self.capacity:
            self._evict_one()

    def _evicted(self, key: K, value: V) -> None:
        self.stats.evictions += 1
        if self._on_evict is not None:
            self._on_evict(key, value)

    @abstractmethod
    def _lookup(self, key: K) -> Any:
        """Return the value or ``MISSING``, recording the access for the eviction policy."""

    @abstractmethod
    def _evict_one(self) -> None:
        """Remove the entry the policy would sacrifice next and report it."""

    @abstractmethod
    def put(self, key: K, value: V) -> None: ...

    @abstractmethod
    def peek(self, key: K, default: Any = None) -> Any:
        """Like ``get`` but without touching recency, frequency or statistics."""

    @abstractmethod
    def pop(self, key: K, default: Any = MISSING) -> Any: ...

    @abstractmethod
    def keys(self) -> list[K]:
        """Keys in eviction order: the first key is the next one to be evicted."""

    @abstractmethod
    def clear(self) -> None: ...

    @abstractmethod
    def __len__(self) -> int: ...

    def __contains__(self, key: object) -> bool:
        return self.peek(key, MISSING) is not MISSING  # type: ignore[arg-type]


def _pop_from(data: dict[Any, Any], key: Any, default: Any) -> Any:
    if key in data:
        return data.pop(key)
    if default is MISSING:
        raise KeyError(key)
    return default


class LRUCache(Cache[K, V]):
    """Evicts the least recently used entry; both ``get`` hits and ``put`` count as use."""

    def __init__(self, capacity: int, on_evict: EvictCallback | None = None) -> None:
        super().__init__(capacity, on_evict)
        self._data: OrderedDict[K, V] = OrderedDict()

    def _lookup(self, key: K) -> Any:
        if key not in self._data:
            return MISSING
        self._data.move_to_end(key)
        return self._data[key]

    def _evict_one(self) -> None:
        key, value = self._data.popitem(last=False)
        self._evicted(key, value)

    def put(self, key: K, value: V) -> None:
        if key in self._data:
            self._data.move_to_end(key)
        elif len(self._data) >= self.capacity:
            self._evict_one()
        self._data[key] = value

    def peek(self, key: K, default: Any = None) -> Any:
        return self._data.get(key, default)

    def pop(self, key: K, default: Any = MISSING) -> Any:
        return _pop_from(self._data, key, default)

    def keys(self) -> list[K]:
        return list(self._data)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


class LFUCache(Cache[K, V]):
    """Evicts the least frequently used entry, and the least recently used among equals.

    Keys are grouped in per-frequency buckets kept in recency order, and the lowest
    non-empty frequency is tracked, so every operation is O(1) apart from ``keys``.
    """

    def __init__(self, capacity: int, on_evict: EvictCallback | None = None) -> None:
        super().__init__(capacity, on_evict)
        self._values: dict[K, V] = {}
        self._freq: dict[K, int] = {}
        self._buckets: dict[int, OrderedDict[K, None]] = {}
        self._min_freq = 0

    def frequency(self, key: K) -> int:
        """Number of uses of ``key`` since it was inserted (0 when absent)."""
        return self._freq.get(key, 0)

    def _unlink(self, key: K) -> int:
        freq = self._freq.pop(key)
        bucket = self._buckets[freq]
        del bucket[key]
        if not bucket:
            del self._buckets[freq]
            if self._min_freq == freq:
                self._min_freq = min(self._buckets, default=0)
        return freq

    def _link(self, key: K, freq: int) -> None:
        self._freq[key] = freq
        self._buckets.setdefault(freq, OrderedDict())[key] = None
        if self._min_freq == 0 or freq < self._min_freq:
            self._min_freq = freq

    def _touch(self, key: K) -> None:
        self._link(key, self._unlink(key) + 1)

    def _lookup(self, key: K) -> Any:
        if key not in self._values:
            return MISSING
        self._touch(key)
        return self._values[key]

    def _evict_one(self) -> None:
        key = next(iter(self._buckets[self._min_freq]))
        self._unlink(key)
        self._evicted(key, self._values.pop(key))

    def put(self, key: K, value: V) -> None:
        if key in self._values:
            self._values[key] = value
            self._touch(key)
            return
        if len(self._values) >= self.capacity:
            self._evict_one()
        self._values[key] = value
        self._link(key, 1)

    def peek(self, key: K, default: Any = None) -> Any:
        return self._values.get(key, default)

    def pop(self, key: K, default: Any = MISSING) -> Any:
        if key in self._values:
            self._unlink(key)
        return _pop_from(self._values, key, default)

    def keys(self) -> list[K]:
        return [key for freq in sorted(self._buckets) for key in self._buckets[freq]]

    def clear(self) -> None:
        self._values.clear()
        self._freq.clear()
        self._buckets.clear()
        self._min_freq = 0

    def __len__(self) -> int:
        return len(self._values)


class TTLCache(Cache[K, V]):
    """LRU cache whose entries also expire ``ttl`` seconds after they were last written.

    An entry written at ``t`` is live while ``clock() < t + ttl``. The clock is injectable so
    that expiry is deterministic in tests; any monotonic float source works. Expired entries
    are dropped lazily on access, or eagerly by :meth:`expire`, and count as expirations,
    not evictions; ``on_evict`` only hears about capacity evictions.
    """

    def __init__(
        self,
        capacity: int,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
        on_evict: EvictCallback | None = None,
    ) -> None:
        super().__init__(capacity, on_evict)
        self.ttl = self._check_ttl(ttl)
        self._clock = clock
        self._data: OrderedDict[K, tuple[V, float]] = OrderedDict()

    @staticmethod
    def _check_ttl(ttl: float) -> float:
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl}")
        return ttl

    def _live_entry(self, key: K, now: float) -> tuple[V, float] | None:
        entry = self._data.get(key)
        if entry is None or now < entry[1]:
            return entry
        del self._data[key]
        self.stats.expirations += 1
        return None

    def _lookup(self, key: K) -> Any:
        entry = self._live_entry(key, self._clock())
        if entry is None:
            return MISSING
        self._data.move_to_end(key)
        return entry[0]

    def _evict_one(self) -> None:
        key, (value, _) = self._data.popitem(last=False)
        self._evicted(key, value)

    def put(self, key: K, value: V, ttl: float | None = None) -> None:
        """Store ``value``; ``ttl`` overrides the cache-wide time-to-live for this entry."""
        lifetime = self.ttl if ttl is None else self._check_ttl(ttl)
        now = self._clock()
        if key in self._data:
            self._data.move_to_end(key)
        elif len(self._data) >= self.capacity and self.expire() == 0:
            # Only sacrifice a live entry when expiring dead ones freed no room.
            self._evict_one()
        self._data[key] = (value, now + lifetime)

    def expire(self) -> int:
        """Drop every expired entry now; return how many were dropped."""
        now = self._clock()
        dead = [key for key, (_, expires_at) in self._data.items() if now >= expires_at]
        for key in dead:
            del self._data[key]
        self.stats.expirations += len(dead)
        return len(dead)

    def ttl_remaining(self, key: K) -> float | None:
        """Seconds until ``key`` expires, or ``None`` if it is absent or already expired."""
        now = self._clock()
        entry = self._live_entry(key, now)
        return None if entry is None else entry[1] - now

    def resize(self, capacity: int) -> None:
        self.expire()
        super().resize(capacity)

    def peek(self, key: K, default: Any = None) -> Any:
        entry = self._data.get(key)
        if entry is None or self._clock() >= entry[1]:
            return default
        return entry[0]

    def pop(self, key: K, default: Any = MISSING) -> Any:
        entry = self._live_entry(key, self._clock())
        if entry is None:
            return _pop_from({}, key, default)
        del self._data[key]
        return entry[0]

    def keys(self) -> list[K]:
        now = self._clock()
        return [key for key, (_, expires_at) in self._data.items() if now < expires_at]

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self.keys())
