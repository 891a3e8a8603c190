"""throttle: rate limiters with an injectable clock."""

from .clock import Clock, ManualClock, SystemClock
from .limiters import (
    EPSILON,
    FixedWindow,
    RateLimiter,
    RateLimitExceeded,
    SlidingWindowCounter,
    SlidingWindowLog,
    TokenBucket,
)
from .registry import KeyedLimiter

__all__ = [
    "EPSILON",
    "Clock",
    "FixedWindow",
    "KeyedLimiter",
    "ManualClock",
    "RateLimitExceeded",
    "RateLimiter",
    "SlidingWindowCounter",
    "SlidingWindowLog",
    "SystemClock",
    "TokenBucket",
]
