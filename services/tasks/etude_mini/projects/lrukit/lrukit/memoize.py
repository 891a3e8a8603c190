"""A memoizing decorator backed by any of the package's caches."""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Any

from .caches import MISSING, Cache, LRUCache
from .stats import CacheStats

_KWARGS_MARK = object()  # separates positional from keyword arguments in generated keys

KeyFunction = Callable[..., Hashable]


def make_key(args: tuple[Any, ...], kwargs: dict[str, Any], typed: bool = False) -> Hashable:
    """Build a hashable key from call arguments.

    Keyword order does not matter (``f(a=1, b=2)`` and ``f(b=2, a=1)`` share an entry), but
    positional and keyword spellings of the same argument are distinct, as in ``functools``.
    With ``typed=True``, ``f(1)`` and ``f(1.0)`` are cached separately.
    """
    items = tuple(sorted(kwargs.items()))
    key: tuple[Any, ...] = args
    if items:
        key += (_KWARGS_MARK, *items)
    if typed:
        key += tuple(type(arg) for arg in args) + tuple(type(value) for _, value in items)
    try:
        hash(key)
    except TypeError:
        raise TypeError("memoize: arguments are unhashable; pass key= to build a key") from None
    return key


class Memoized:
    """A function wrapped with a cache; also works on methods via the descriptor protocol."""

    def __init__(
        self, func: Callable[..., Any], cache: Cache[Any, Any], key: KeyFunction | None, typed: bool
    ) -> None:
        functools.update_wrapper(self, func)
        self.__wrapped__ = func
        self.cache = cache
        self._key = key
        self._typed = typed

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._key is not None:
            cache_key = self._key(*args, **kwargs)
        else:
            cache_key = make_key(args, kwargs, self._typed)
        value = self.cache.get(cache_key, MISSING)
        if value is MISSING:
            # Exceptions propagate before ``put``, so failures are never cached.
            value = self.__wrapped__(*args, **kwargs)
            self.cache.put(cache_key, value)
        return value

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self, instance)

    def cache_info(self) -> CacheStats:
        return self.cache.stats

    def cache_clear(self) -> None:
        """Empty the cache and reset its statistics."""
        self.cache.clear()
        self.cache.stats.reset()


def memoize(
    cache: Cache[Any, Any] | Callable[..., Any] | None = None,
    *,
    key: KeyFunction | None = None,
    maxsize: int = 128,
    typed: bool = False,
) -> Any:
    """Cache a function's results.

    Usable bare (``@memoize``), with options (``@memoize(maxsize=10)``) or with an explicit
    cache instance (``@memoize(TTLCache(100, ttl=60))``). Without a cache, an ``LRUCache`` of
    ``maxsize`` entries is created per decorated function. ``key`` receives the call's
    arguments and returns the cache key, e.g. to ignore an argument that does not affect the
    result; ``typed`` only applies to the default key. Give each function its own cache
    instance: keys carry no trace of the function they came from.
    """
    if cache is not None and not isinstance(cache, Cache):
        if not callable(cache):
            raise TypeError(f"memoize expects a Cache or a function, got {type(cache).__name__}")
        return Memoized(cache, LRUCache(maxsize), key, typed)
    if key is not None and typed:
        raise ValueError("typed applies to the default key only; fold types into key= instead")

    def decorate(func: Callable[..., Any]) -> Memoized:
        store = cache if cache is not None else LRUCache(maxsize)
        return Memoized(func, store, key, typed)

    return decorate
