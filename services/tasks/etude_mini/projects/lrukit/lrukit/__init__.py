"""Bounded LRU, LFU and TTL caches with statistics, and a memoize decorator."""

from .caches import MISSING, Cache, LFUCache, LRUCache, TTLCache
from .memoize import Memoized, make_key, memoize
from .stats import CacheStats

__all__ = [
    "MISSING",
    "Cache",
    "CacheStats",
    "LFUCache",
    "LRUCache",
    "Memoized",
    "TTLCache",
    "make_key",
    "memoize",
]
