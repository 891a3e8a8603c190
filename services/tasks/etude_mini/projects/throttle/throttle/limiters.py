"""Rate limiting algorithms sharing one interface: try_acquire, acquire, time_until_available.

All arithmetic is in seconds on the injected clock. Float timestamps make exact boundaries
unreliable (0.1 + 0.2 != 0.3), so comparisons allow a tolerance of ``EPSILON``: sleeping for
exactly the reported wait is always enough to be admitted.
"""

import math
from abc import ABC, abstractmethod
from collections import deque

from .clock import Clock, SystemClock

EPSILON = 1e-9


class RateLimitExceeded(Exception):
    """Raised by ``acquire`` when the wait would exceed the caller's timeout."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__(f"rate limit exceeded; retry after {retry_after:.3f}s")


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _positive_float(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


class RateLimiter(ABC):
    """Base class: subclasses only say how long ``n`` permits would take and how to take them."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()

    @property
    @abstractmethod
    def capacity(self) -> int:
        """The most permits a single call can ever obtain."""

    @abstractmethod
    def _wait_time(self, n: int, now: float) -> float:
        """Seconds from ``now`` until ``n`` permits are available (0 if available now)."""

    @abstractmethod
    def _consume(self, n: int, now: float) -> None:
        """Record that ``n`` permits were granted at ``now``."""

    def _check(self, n: int) -> None:
        _positive_int("n", n)
        if n > self.capacity:
            # Waiting would never help, so fail loudly instead of blocking forever.
            raise ValueError(f"cannot acquire {n} permits; capacity is {self.capacity}")

    def try_acquire(self, n: int = 1) -> bool:
        """Take ``n`` permits if they are available right now; never blocks."""
        self._check(n)
        now = self.clock.now()
        if self._wait_time(n, now) > 0:
            return False
        self._consume(n, now)
        return True

    def time_until_available(self, n: int = 1) -> float:
        """Seconds until ``try_acquire(n)`` would succeed, assuming no other callers."""
        self._check(n)
        return self._wait_time(n, self.clock.now())

    def acquire(self, n: int = 1, *, timeout: float | None = None) -> float:
        """Take ``n`` permits, sleeping on the clock as needed; return the seconds waited.

        If the permits cannot be had within ``timeout`` seconds, raise
        :class:`RateLimitExceeded` immediately rather than sleeping first.
        """
        self._check(n)
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must not be negative, got {timeout!r}")
        start = self.clock.now()
        while True:
            now = self.clock.now()
            wait = self._wait_time(n, now)
            if wait <= 0:
                self._consume(n, now)
                return now - start
            if timeout is not None and now - start + wait > timeout + EPSILON:
                raise RateLimitExceeded(wait)
            self.clock.sleep(wait)


class TokenBucket(RateLimiter):
    """Holds up to ``capacity`` tokens, refilled continuously at ``rate`` tokens per second.

    A full bucket allows a burst of ``capacity`` requests; after that, requests are admitted
    at the steady ``rate``. The bucket starts full unless ``initial`` says otherwise.
    """

    def __init__(
        self,
        rate: float,
        capacity: int,
        *,
        initial: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(clock)
        self.rate = _positive_float("rate", rate)
        self._capacity = _positive_int("capacity", capacity)
        tokens = float(capacity if initial is None else initial)
        if not 0 <= tokens <= capacity:
            raise ValueError(f"initial must be between 0 and {capacity}, got {initial!r}")
        self._tokens = tokens
        self._updated = self.clock.now()

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def tokens(self) -> float:
        """Tokens available right now (fractional between refills)."""
        self._refill(self.clock.now())
        return self._tokens

    def _refill(self, now: float) -> None:
        elapsed = now - self._updated
        # A clock that steps backwards must not drain tokens, and must not move the
        # reference point back either, or the same interval would be credited twice.
        if elapsed > 0:
            self._tokens = min(float(self._capacity), self._tokens + elapsed * self.rate)
            self._updated = now

    def _wait_time(self, n: int, now: float) -> float:
        self._refill(now)
        deficit = n - self._tokens
        return 0.0 if deficit <= EPSILON else deficit / self.rate

    def _consume(self, n: int, now: float) -> None:
        self._refill(now)
        self._tokens = max(self._tokens - n, 0.0)


class _Windowed(RateLimiter):
    """Shared validation and window arithmetic for the window-based limiters.

    Windows are aligned to multiples of ``window`` on the clock's timeline rather than to the
    first request, so every limiter sharing a clock agrees on where windows start.
    """

    def __init__(self, limit: int, window: float, clock: Clock | None = None) -> None:
        super().__init__(clock)
        self.limit = _positive_int("limit", limit)
        self.window = _positive_float("window", window)

    @property
    def capacity(self) -> int:
        return self.limit

    def _window_index(self, now: float) -> int:
        return math.floor(now / self.window + EPSILON)


class FixedWindow(_Windowed):
    """At most ``limit`` permits per window; the count resets when a new window starts.

    Cheap and simple, but allows up to twice the limit across a window boundary.
    """

    def __init__(self, limit: int, window: float, *, clock: Clock | None = None) -> None:
        super().__init__(limit, window, clock)
        self._index = self._window_index(self.clock.now())
        self._count = 0

    def _roll(self, now: float) -> None:
        index = self._window_index(now)
        if index > self._index:
            self._index, self._count = index, 0

    @property
    def remaining(self) -> int:
        """Permits left in the current window."""
        self._roll(self.clock.now())
        return self.limit - self._count

    def _wait_time(self, n: int, now: float) -> float:
        self._roll(now)
        if self._count + n <= self.limit:
            return 0.0
        return max((self._index + 1) * self.window - now, 0.0)

    def _consume(self, n: int, now: float) -> None:
        self._roll(now)
        self._count += n


class SlidingWindowLog(_Windowed):
    """Exact sliding window: remembers every grant and admits a request only if the grants in
    the trailing ``window`` seconds plus the request stay within ``limit``.

    Precise at the cost of memory proportional to the number of grants in one window.
    """

    def __init__(self, limit: int, window: float, *, clock: Clock | None = None) -> None:
        super().__init__(limit, window, clock)
        self._log: deque[tuple[float, int]] = deque()
        self._total = 0

    def _expire(self, now: float) -> None:
        # A grant at time t stops counting at exactly t + window.
        while self._log and self._log[0][0] + self.window <= now + EPSILON:
            self._total -= self._log.popleft()[1]

    @property
    def in_window(self) -> int:
        """Permits granted during the trailing window."""
        self._expire(self.clock.now())
        return self._total

    def _wait_time(self, n: int, now: float) -> float:
        self._expire(now)
        excess = self._total + n - self.limit
        if excess <= 0:
            return 0.0
        freed = 0
        for granted_at, count in self._log:
            freed += count
            if freed >= excess:
                return granted_at + self.window - now
        raise AssertionError("unreachable: n never exceeds the limit")

    def _consume(self, n: int, now: float) -> None:
        self._expire(now)
        self._log.append((now, n))
        self._total += n


class SlidingWindowCounter(_Windowed):
    """Approximate sliding window in constant memory.

    Keeps counts for the current and previous fixed windows and estimates the trailing
    window as ``previous * overlap + current``, where ``overlap`` is the fraction of the
    previous window still inside the trailing window. Assumes grants in the previous
    window were spread evenly.
    """

    def __init__(self, limit: int, window: float, *, clock: Clock | None = None) -> None:
        super().__init__(limit, window, clock)
        self._index = self._window_index(self.clock.now())
        self._current = 0
        self._previous = 0

    def _roll(self, now: float) -> None:
        index = self._window_index(now)
        if index > self._index:
            # Only an adjacent window carries over; after a gap the previous one was empty.
            self._previous = self._current if index == self._index + 1 else 0
            self._current = 0
            self._index = index

    def _overlap(self, now: float) -> float:
        elapsed = now - self._index * self.window
        return min(max(1.0 - elapsed / self.window, 0.0), 1.0)

    def estimate(self) -> float:
        """Estimated permits granted during the trailing window."""
        now = self.clock.now()
        self._roll(now)
        return self._previous * self._overlap(now) + self._current

    def _wait_time(self, n: int, now: float) -> float:
        self._roll(now)
        allowed = self.limit - n
        if self._previous * self._overlap(now) + self._current <= allowed + EPSILON:
            return 0.0
        window_start = self._index * self.window
        if self._current <= allowed:
            # Wait inside this window until the previous window's share has decayed enough.
            fraction = 1.0 - (allowed - self._current) / self._previous
            return max(window_start + fraction * self.window - now, 0.0)
        # Even with the previous window gone this one is too full; in the next window the
        # current count becomes "previous" and decays from there.
        fraction = 1.0 - allowed / self._current
        return window_start + (1.0 + fraction) * self.window - now

    def _consume(self, n: int, now: float) -> None:
        self._roll(now)
        self._current += n
