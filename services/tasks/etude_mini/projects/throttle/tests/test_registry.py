import pytest

from throttle import KeyedLimiter, ManualClock, TokenBucket


def make(
    clock: ManualClock, idle_timeout: float = 30.0, max_keys: int | None = None
) -> KeyedLimiter[str]:
    return KeyedLimiter(
        lambda: TokenBucket(rate=1, capacity=2, clock=clock),
        idle_timeout=idle_timeout,
        max_keys=max_keys,
        clock=clock,
    )


def test_each_key_gets_an_independent_limiter():
    clock = ManualClock()
    limiter = make(clock)
    assert [limiter.try_acquire("alice") for _ in range(3)] == [True, True, False]
    assert limiter.try_acquire("bob") is True
    assert len(limiter) == 2
    assert "alice" in limiter


def test_keys_idle_for_exactly_the_timeout_are_evicted():
    clock = ManualClock()
    limiter = make(clock, idle_timeout=30.0)
    limiter.try_acquire("alice")
    clock.advance(10)
    limiter.try_acquire("bob")
    clock.advance(19.5)
    assert limiter.evict_idle() == []
    clock.advance(0.5)
    assert limiter.evict_idle() == ["alice"]
    assert list(limiter) == ["bob"]


def test_using_a_key_keeps_it_alive_and_reorders_it():
    clock = ManualClock()
    limiter = make(clock, idle_timeout=30.0)
    limiter.try_acquire("alice")
    limiter.try_acquire("bob")
    clock.advance(20)
    limiter.try_acquire("alice")
    assert list(limiter) == ["bob", "alice"]
    clock.advance(10)
    assert limiter.evict_idle() == ["bob"]
    assert "alice" in limiter


def test_evicted_key_starts_again_with_a_fresh_limiter():
    clock = ManualClock()
    limiter = KeyedLimiter(
        lambda: TokenBucket(rate=0.01, capacity=1, clock=clock), idle_timeout=5, clock=clock
    )
    assert limiter.try_acquire("alice") is True
    clock.advance(4)
    assert limiter.try_acquire("alice") is False
    clock.advance(5)
    assert limiter.try_acquire("alice") is True


def test_max_keys_evicts_least_recently_used():
    clock = ManualClock()
    limiter = make(clock, max_keys=2)
    limiter.try_acquire("a")
    limiter.try_acquire("b")
    limiter.try_acquire("a")
    limiter.try_acquire("c")
    assert list(limiter) == ["a", "c"]
    assert "b" not in limiter


def test_time_until_available_does_not_create_or_refresh_keys():
    clock = ManualClock()
    limiter = make(clock, idle_timeout=10)
    assert limiter.time_until_available("ghost", 2) == 0.0
    assert "ghost" not in limiter
    limiter.try_acquire("alice", 2)
    clock.advance(9)
    assert limiter.time_until_available("alice", 2) == pytest.approx(0.0)
    clock.advance(1)
    assert limiter.time_until_available("alice") == 0.0
    assert len(limiter) == 0


def test_keyed_acquire_blocks_on_that_keys_limiter():
    clock = ManualClock()
    limiter = make(clock)
    limiter.try_acquire("alice", 2)
    assert limiter.acquire("alice", 1) == pytest.approx(1.0)
    assert limiter.acquire("bob", 2) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"idle_timeout": 0}, "idle_timeout must be positive, got 0"),
        ({"idle_timeout": 1, "max_keys": 0}, "max_keys must be at least 1, got 0"),
    ],
    ids=["zero-idle-timeout", "zero-max-keys"],
)
def test_registry_validates_configuration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        KeyedLimiter(lambda: TokenBucket(1, 1), clock=ManualClock(), **kwargs)


def test_single_key_registry_keeps_only_the_latest_key():
    clock = ManualClock()
    limiter = make(clock, max_keys=1)
    limiter.try_acquire("a", 2)
    limiter.try_acquire("b")
    assert list(limiter) == ["b"]
    assert limiter.try_acquire("a", 2) is True


def test_default_request_size_is_one_permit():
    clock = ManualClock()
    limiter = make(clock)
    limiter.try_acquire("alice")
    assert limiter.time_until_available("alice") == 0.0
    assert limiter.acquire("alice") == 0.0
    assert limiter.time_until_available("alice") == pytest.approx(1.0)
