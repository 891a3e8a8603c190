"""Per-key limiters (one per user, IP address or API token) with idle-key eviction."""

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from .clock import Clock, SystemClock
from .limiters import RateLimiter

K = TypeVar("K", bound=Hashable)


class KeyedLimiter(Generic[K]):
    """Creates a limiter per key on first use and forgets keys that stay idle.

    Evicting a key forgets its history, so ``idle_timeout`` should be at least the time a
    limiter needs to recover fully (``capacity / rate`` for a token bucket, ``window`` for
    window limiters); otherwise a client could get a fresh allowance early by pausing.
    ``max_keys`` additionally bounds memory by evicting the least recently used key.
    """

    def __init__(
        self,
        factory: Callable[[], RateLimiter],
        *,
        idle_timeout: float,
        max_keys: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be positive, got {idle_timeout!r}")
        if max_keys is not None and max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys!r}")
        self._factory = factory
        self.idle_timeout = idle_timeout
        self.max_keys = max_keys
        self.clock: Clock = clock if clock is not None else SystemClock()
        # Ordered from least to most recently used, so idle keys are always at the front.
        self._limiters: OrderedDict[K, RateLimiter] = OrderedDict()
        self._last_used: dict[K, float] = {}

    def __len__(self) -> int:
        return len(self._limiters)

    def __contains__(self, key: object) -> bool:
        return key in self._limiters

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._limiters))

    def evict_idle(self) -> list[K]:
        """Drop keys unused for at least ``idle_timeout`` seconds; return them, oldest first."""
        now = self.clock.now()
        evicted: list[K] = []
        while self._limiters:
            oldest = next(iter(self._limiters))
            if now - self._last_used[oldest] < self.idle_timeout:
                break
            self._forget(oldest)
            evicted.append(oldest)
        return evicted

    def _forget(self, key: K) -> None:
        del self._limiters[key]
        del self._last_used[key]

    def _touch(self, key: K) -> RateLimiter:
        self.evict_idle()
        limiter = self._limiters.get(key)
        if limiter is None:
            limiter = self._limiters[key] = self._factory()
            if self.max_keys is not None and len(self._limiters) > self.max_keys:
                self._forget(next(iter(self._limiters)))
        else:
            self._limiters.move_to_end(key)
        self._last_used[key] = self.clock.now()
        return limiter

    def try_acquire(self, key: K, n: int = 1) -> bool:
        return self._touch(key).try_acquire(n)

    def acquire(self, key: K, n: int = 1, *, timeout: float | None = None) -> float:
        return self._touch(key).acquire(n, timeout=timeout)

    def time_until_available(self, key: K, n: int = 1) -> float:
        """Like the limiter's method, but a query neither creates a key nor keeps it alive."""
        self.evict_idle()
        limiter = self._limiters.get(key)
        return (limiter or self._factory()).time_until_available(n)
