import pytest
from lrukit import TTLCache


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    return FakeClock()


def test_entry_is_live_until_exactly_ttl_has_passed(clock):
    cache = TTLCache(4, ttl=10, clock=clock)
    cache.put("a", 1)
    clock.advance(9.999)
    assert cache.get("a") == 1
    clock.advance(0.001)
    assert cache.get("a") is None
    assert cache.stats.expirations == 1
    assert cache.stats.misses == 1


def test_rewriting_a_key_refreshes_its_lifetime(clock):
    cache = TTLCache(4, ttl=10, clock=clock)
    cache.put("a", 1)
    clock.advance(8)
    cache.put("a", 2)
    clock.advance(8)
    assert cache.get("a") == 2
    assert cache.ttl_remaining("a") == 2


def test_per_entry_ttl_overrides_default(clock):
    cache = TTLCache(4, ttl=10, clock=clock)
    cache.put("short", 1, ttl=1)
    cache.put("long", 2)
    clock.advance(1)
    assert "short" not in cache
    assert "long" in cache
    assert cache.ttl_remaining("short") is None


def test_full_cache_expires_dead_entries_before_evicting_live_ones(clock):
    evicted = []
    cache = TTLCache(2, ttl=10, clock=clock, on_evict=lambda k, v: evicted.append(k))
    cache.put("old", 1, ttl=1)
    cache.put("live", 2)
    clock.advance(5)
    cache.put("new", 3)
    assert evicted == []
    assert cache.keys() == ["live", "new"]
    assert cache.stats.expirations == 1
    assert cache.stats.evictions == 0


def test_full_cache_of_live_entries_evicts_least_recently_used(clock):
    evicted = []
    cache = TTLCache(2, ttl=10, clock=clock, on_evict=lambda k, v: evicted.append((k, v)))
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)
    assert evicted == [("b", 2)]
    assert cache.keys() == ["a", "c"]


def test_expire_sweeps_all_dead_entries_and_reports_count(clock):
    cache = TTLCache(5, ttl=10, clock=clock)
    cache.put("a", 1, ttl=2)
    cache.put("b", 2, ttl=3)
    cache.put("c", 3, ttl=4)
    clock.advance(3)
    assert len(cache) == 1
    assert cache.expire() == 2
    assert cache.expire() == 0
    assert cache.keys() == ["c"]
    assert cache.stats.expirations == 2


def test_peek_hides_expired_entries_without_counting(clock):
    cache = TTLCache(2, ttl=5, clock=clock)
    cache.put("a", 1)
    clock.advance(4.5)
    assert cache.peek("a", "dead") == 1
    clock.advance(0.5)
    assert cache.peek("a", "dead") == "dead"
    assert cache.stats.expirations == 0
    assert cache.stats.lookups == 0


def test_pop_of_expired_entry_behaves_like_missing(clock):
    cache = TTLCache(2, ttl=5, clock=clock)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.pop("b") == 2
    clock.advance(6)
    assert cache.pop("a", None) is None
    with pytest.raises(KeyError, match="'a'"):
        cache.pop("a")


def test_resize_discards_expired_entries_before_evicting(clock):
    evicted = []
    cache = TTLCache(3, ttl=10, clock=clock, on_evict=lambda k, v: evicted.append(k))
    cache.put("a", 1, ttl=1)
    cache.put("b", 2)
    cache.put("c", 3)
    clock.advance(2)
    cache.resize(2)
    assert evicted == []
    cache.resize(1)
    assert evicted == ["b"]
    assert cache.keys() == ["c"]


@pytest.mark.parametrize("ttl", [0, -1.5])
def test_rejects_non_positive_ttl(ttl, clock):
    with pytest.raises(ValueError, match=f"ttl must be positive, got {ttl}"):
        TTLCache(2, ttl=ttl, clock=clock)
    cache = TTLCache(2, ttl=1, clock=clock)
    with pytest.raises(ValueError, match="ttl must be positive"):
        cache.put("a", 1, ttl=ttl)
