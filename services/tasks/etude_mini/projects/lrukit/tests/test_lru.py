import pytest
from lrukit import LRUCache


def test_evicts_least_recently_used_entry():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"]
    assert "b" not in cache


def test_put_on_existing_key_updates_value_and_recency_without_eviction():
    evicted = []
    cache = LRUCache(2, on_evict=lambda k, v: evicted.append((k, v)))
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    assert evicted == []
    cache.put("c", 3)
    assert evicted == [("b", 2)]
    assert cache.peek("a") == 10
    assert cache.stats.evictions == 1


def test_fills_exactly_to_capacity_before_evicting():
    cache = LRUCache(3)
    for i in range(3):
        cache.put(i, i)
    assert len(cache) == 3
    assert cache.stats.evictions == 0
    cache.put(3, 3)
    assert len(cache) == 3
    assert cache.keys() == [1, 2, 3]


def test_capacity_one_keeps_only_latest_entry():
    cache = LRUCache(1)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.keys() == ["b"]


def test_get_counts_hits_and_misses_and_returns_default():
    cache = LRUCache(2)
    cache.put("a", None)
    assert cache.get("a", "dflt") is None
    assert cache.get("zzz", "dflt") == "dflt"
    assert cache.get("zzz") is None
    assert (cache.stats.hits, cache.stats.misses) == (1, 2)


def test_peek_and_contains_do_not_change_recency_or_stats():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1
    assert "a" in cache
    assert cache.peek("nope", 0) == 0
    cache.put("c", 3)
    assert cache.keys() == ["b", "c"]
    assert cache.stats.lookups == 0


def test_pop_removes_and_raises_key_error_without_default():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.pop("a") == 1
    assert cache.pop("a", "gone") == "gone"
    with pytest.raises(KeyError, match="'a'"):
        cache.pop("a")
    assert len(cache) == 0


def test_resize_shrinks_by_evicting_oldest_first():
    evicted = []
    cache = LRUCache(4, on_evict=lambda k, v: evicted.append(k))
    for key in "abcd":
        cache.put(key, key.upper())
    cache.get("a")
    cache.resize(2)
    assert evicted == ["b", "c"]
    assert cache.keys() == ["d", "a"]
    cache.resize(5)
    assert cache.capacity == 5
    assert cache.keys() == ["d", "a"]


@pytest.mark.parametrize(
    ("capacity", "error", "message"),
    [
        (0, ValueError, "capacity must be at least 1, got 0"),
        (-3, ValueError, "capacity must be at least 1, got -3"),
        (2.5, TypeError, "capacity must be an int, got float"),
        (True, TypeError, "capacity must be an int, got bool"),
    ],
)
def test_rejects_invalid_capacity(capacity, error, message):
    with pytest.raises(error, match=message):
        LRUCache(capacity)


def test_get_or_compute_calls_factory_only_on_miss():
    cache = LRUCache(2)
    calls = []

    def factory():
        calls.append(1)
        return len(calls) * 10

    assert cache.get_or_compute("k", factory) == 10
    assert cache.get_or_compute("k", factory) == 10
    assert calls == [1]
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)


def test_clear_keeps_statistics():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.get("a")
    cache.clear()
    assert len(cache) == 0
    assert cache.stats.hits == 1
