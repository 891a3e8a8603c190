import pytest
from lrukit import CacheStats, LFUCache, LRUCache, TTLCache, make_key, memoize


def test_stats_hit_rate_and_text():
    stats = CacheStats(hits=3, misses=1, evictions=2)
    assert stats.lookups == 4
    assert stats.hit_rate == 0.75
    assert str(stats) == "hits=3 misses=1 hit_rate=75.0% evictions=2 expirations=0"
    stats.reset()
    assert stats == CacheStats()
    assert stats.hit_rate == 0.0


def test_memoize_caches_results_and_reports_stats():
    calls = []

    @memoize(maxsize=2)
    def square(x):
        calls.append(x)
        return x * x

    assert [square(2), square(2), square(3)] == [4, 4, 9]
    assert calls == [2, 3]
    info = square.cache_info()
    assert (info.hits, info.misses) == (1, 2)
    assert isinstance(square.cache, LRUCache)
    assert square.cache.capacity == 2


def test_bare_decorator_preserves_metadata():
    @memoize
    def greet(name):
        """Say hello."""
        return f"hello {name}"

    assert greet("ann") == "hello ann"
    assert greet.__name__ == "greet"
    assert greet.__doc__ == "Say hello."
    assert greet.cache.capacity == 128


def test_keyword_order_does_not_matter_but_spelling_does():
    assert make_key((), {"a": 1, "b": 2}) == make_key((), {"b": 2, "a": 1})
    assert make_key((1,), {}) != make_key((), {"x": 1})
    assert make_key((1, 2), {}) == (1, 2)


def test_typed_keys_separate_int_and_float():
    assert make_key((1,), {}) == make_key((1.0,), {})
    assert make_key((1,), {}, typed=True) != make_key((1.0,), {}, typed=True)
    calls = []

    @memoize(typed=True)
    def ident(x):
        calls.append(x)
        return x

    ident(1)
    ident(1.0)
    ident(1)
    assert calls == [1, 1.0]


def test_unhashable_arguments_need_a_key_function():
    @memoize
    def total(values):
        return sum(values)

    with pytest.raises(TypeError, match="arguments are unhashable; pass key="):
        total([1, 2])

    @memoize(key=lambda values: tuple(values))
    def total_keyed(values):
        return sum(values)

    assert total_keyed([1, 2]) == 3
    assert total_keyed([1, 2]) == 3
    assert total_keyed.cache_info().hits == 1


def test_custom_key_can_ignore_arguments():
    calls = []

    @memoize(LFUCache(10), key=lambda user, request_id: user)
    def profile(user, request_id):
        calls.append(request_id)
        return {"user": user}

    assert profile("ann", 1) == {"user": "ann"}
    assert profile("ann", 2) == {"user": "ann"}
    assert calls == [1]
    assert profile.cache.frequency("ann") == 2


def test_none_results_are_cached_and_exceptions_are_not():
    calls = []

    @memoize
    def maybe(x):
        calls.append(x)
        if x < 0:
            raise ValueError("negative")
        return None

    assert maybe(1) is None
    assert maybe(1) is None
    for _ in range(2):
        with pytest.raises(ValueError, match="negative"):
            maybe(-1)
    assert calls == [1, -1, -1]


def test_memoize_with_ttl_cache_recomputes_after_expiry():
    now = [0.0]
    calls = []

    @memoize(TTLCache(8, ttl=30, clock=lambda: now[0]))
    def fetch(key):
        calls.append(now[0])
        return len(calls)

    assert fetch("k") == 1
    now[0] = 29.0
    assert fetch("k") == 1
    now[0] = 30.0
    assert fetch("k") == 2
    assert calls == [0.0, 30.0]
    assert fetch.cache_info().expirations == 1


def test_memoized_methods_bind_instances():
    class Circle:
        def __init__(self, r):
            self.r = r

        @memoize
        def area(self):
            return 3 * self.r * self.r

    a, b = Circle(1), Circle(2)
    assert (a.area(), b.area(), a.area()) == (3, 12, 3)
    assert Circle.__dict__["area"].cache_info().hits == 1
    assert Circle.area is Circle.__dict__["area"]


def test_cache_clear_empties_cache_and_resets_stats():
    @memoize
    def double(x):
        return 2 * x

    double(1)
    double(1)
    double.cache_clear()
    assert len(double.cache) == 0
    assert double.cache_info() == CacheStats()


def test_memoize_argument_validation():
    with pytest.raises(TypeError, match="memoize expects a Cache or a function, got int"):
        memoize(5)
    with pytest.raises(ValueError, match="typed applies to the default key only"):
        memoize(key=lambda x: x, typed=True)
