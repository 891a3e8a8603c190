import pytest
from lrukit import LFUCache


def test_evicts_least_frequently_used_entry():
    cache = LFUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)
    assert sorted(cache.keys()) == ["a", "c"]
    assert cache.frequency("a") == 2
    assert cache.frequency("b") == 0


def test_ties_are_broken_by_least_recent_use():
    cache = LFUCache(3)
    for key in "abc":
        cache.put(key, key)
    cache.get("a")
    cache.get("b")
    cache.get("c")
    cache.get("a")
    # b and c both have frequency 2; b was used longer ago.
    cache.put("d", "d")
    assert "b" not in cache
    assert cache.keys() == ["d", "c", "a"]


def test_new_entry_is_evicted_before_older_frequent_ones():
    cache = LFUCache(2)
    cache.put("a", 1)
    cache.get("a")
    cache.put("b", 2)
    cache.put("c", 3)
    assert cache.keys() == ["c", "a"]


def test_put_on_existing_key_counts_as_use():
    cache = LFUCache(2)
    cache.put("a", 1)
    cache.put("a", 2)
    cache.put("b", 3)
    cache.put("c", 4)
    assert cache.peek("a") == 2
    assert cache.frequency("a") == 2
    assert cache.keys() == ["c", "a"]


def test_keys_are_listed_in_eviction_order():
    cache = LFUCache(4)
    for key in "wxyz":
        cache.put(key, 0)
    for key, uses in (("w", 3), ("x", 1), ("y", 2)):
        for _ in range(uses):
            cache.get(key)
    order = cache.keys()
    assert order == ["z", "x", "y", "w"]
    assert [cache.frequency(k) for k in order] == [1, 2, 3, 4]


def test_pop_of_only_minimum_frequency_key_moves_minimum_up():
    cache = LFUCache(3)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("b")
    cache.put("c", 3)
    cache.get("c")
    cache.get("c")
    assert cache.pop("a") == 1
    # No insert follows, so the eviction below relies on the minimum tracked by pop.
    cache.resize(1)
    assert cache.keys() == ["c"]
    with pytest.raises(KeyError):
        cache.pop("a")


def test_insert_after_eviction_restarts_minimum_at_one():
    cache = LFUCache(2)
    cache.put("a", 1)
    cache.get("a")
    cache.put("b", 2)
    cache.get("b")
    cache.put("c", 3)
    cache.put("d", 4)
    assert cache.keys() == ["d", "b"]


def test_resize_evicts_in_frequency_order_and_tracks_minimum():
    evicted = []
    cache = LFUCache(4, on_evict=lambda k, v: evicted.append(k))
    for key in "abcd":
        cache.put(key, key)
    for key, uses in (("a", 1), ("b", 3), ("d", 2)):
        for _ in range(uses):
            cache.get(key)
    cache.resize(2)
    assert evicted == ["c", "a"]
    assert cache.keys() == ["d", "b"]
    assert cache.stats.evictions == 2


def test_clear_resets_frequencies():
    cache = LFUCache(2)
    cache.put("a", 1)
    cache.get("a")
    cache.clear()
    assert cache.frequency("a") == 0
    cache.put("b", 1)
    cache.put("c", 1)
    cache.put("d", 1)
    assert cache.keys() == ["c", "d"]


def test_miss_does_not_create_frequency():
    cache = LFUCache(1)
    assert cache.get("ghost") is None
    assert cache.frequency("ghost") == 0
    assert cache.stats.misses == 1
