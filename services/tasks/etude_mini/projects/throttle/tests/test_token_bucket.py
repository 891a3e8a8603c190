import pytest

from throttle import ManualClock, RateLimitExceeded, SystemClock, TokenBucket


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=100.0)


def test_full_bucket_allows_a_burst_of_capacity(clock):
    bucket = TokenBucket(rate=1, capacity=3, clock=clock)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]


def test_tokens_refill_continuously_at_rate(clock):
    bucket = TokenBucket(rate=4, capacity=10, initial=0, clock=clock)
    clock.advance(0.5)
    assert bucket.tokens == pytest.approx(2.0)
    assert bucket.try_acquire(2) is True
    assert bucket.try_acquire(1) is False


def test_refill_never_exceeds_capacity(clock):
    bucket = TokenBucket(rate=100, capacity=5, initial=1, clock=clock)
    clock.advance(60)
    assert bucket.tokens == 5.0


def test_try_acquire_takes_all_or_nothing(clock):
    bucket = TokenBucket(rate=1, capacity=5, initial=2, clock=clock)
    assert bucket.try_acquire(3) is False
    assert bucket.tokens == 2.0
    assert bucket.try_acquire(2) is True
    assert bucket.tokens == 0.0


def test_time_until_available_is_deficit_over_rate(clock):
    bucket = TokenBucket(rate=2, capacity=5, initial=1, clock=clock)
    assert bucket.time_until_available(1) == 0.0
    assert bucket.time_until_available(2) == pytest.approx(0.5)
    assert bucket.time_until_available(5) == pytest.approx(2.0)


def test_acquire_sleeps_exactly_the_deficit_and_reports_it(clock):
    bucket = TokenBucket(rate=4, capacity=4, initial=1, clock=clock)
    assert bucket.acquire(3) == pytest.approx(0.5)
    assert clock.sleeps == [pytest.approx(0.5)]
    assert bucket.tokens == pytest.approx(0.0)


def test_acquire_without_waiting_does_not_sleep(clock):
    bucket = TokenBucket(rate=1, capacity=2, clock=clock)
    assert bucket.acquire(2) == 0.0
    assert clock.sleeps == []


def test_acquire_respects_timeout_boundary(clock):
    bucket = TokenBucket(rate=1, capacity=5, initial=0, clock=clock)
    with pytest.raises(RateLimitExceeded, match=r"retry after 2\.000s") as info:
        bucket.acquire(2, timeout=1.999)
    assert info.value.retry_after == pytest.approx(2.0)
    assert clock.sleeps == []
    assert bucket.acquire(2, timeout=2.0) == pytest.approx(2.0)


def test_repeated_acquire_paces_requests_without_float_drift(clock):
    bucket = TokenBucket(rate=10, capacity=1, clock=clock)
    waits = [bucket.acquire() for _ in range(31)]
    assert waits[0] == 0.0
    assert waits[1:] == [pytest.approx(0.1)] * 30
    assert clock.now() == pytest.approx(103.0)


def test_clock_stepping_backwards_neither_drains_nor_double_credits():
    class SteppingClock(ManualClock):
        def set(self, value: float) -> None:
            self._now = value

    clock = SteppingClock(10.0)
    bucket = TokenBucket(rate=1, capacity=10, initial=0, clock=clock)
    clock.set(5.0)
    assert bucket.tokens == 0.0
    clock.set(12.0)
    assert bucket.tokens == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 0, "capacity": 1}, "rate must be a positive finite number, got 0"),
        ({"rate": float("inf"), "capacity": 1}, "rate must be a positive finite number"),
        ({"rate": 1, "capacity": 0}, "capacity must be a positive integer, got 0"),
        ({"rate": 1, "capacity": 2.5}, "capacity must be a positive integer, got 2.5"),
        ({"rate": 1, "capacity": True}, "capacity must be a positive integer, got True"),
        ({"rate": 1, "capacity": 3, "initial": 4}, "initial must be between 0 and 3, got 4"),
        ({"rate": 1, "capacity": 3, "initial": -1}, "initial must be between 0 and 3, got -1"),
    ],
    ids=[
        "zero-rate",
        "infinite-rate",
        "zero-capacity",
        "fractional-capacity",
        "bool-capacity",
        "initial-too-big",
        "initial-negative",
    ],
)
def test_invalid_configuration_is_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenBucket(**kwargs, clock=ManualClock())


@pytest.mark.parametrize(
    ("n", "message"),
    [
        (0, "n must be a positive integer, got 0"),
        (-2, "n must be a positive integer, got -2"),
        (4, "cannot acquire 4 permits; capacity is 3"),
    ],
    ids=["zero", "negative", "over-capacity"],
)
def test_invalid_request_sizes_are_rejected(clock, n, message):
    bucket = TokenBucket(rate=1, capacity=3, clock=clock)
    for call in (bucket.try_acquire, bucket.acquire, bucket.time_until_available):
        with pytest.raises(ValueError, match=message):
            call(n)


def test_request_equal_to_capacity_is_allowed(clock):
    bucket = TokenBucket(rate=1, capacity=3, clock=clock)
    assert bucket.try_acquire(3) is True


def test_negative_timeout_is_rejected(clock):
    bucket = TokenBucket(rate=1, capacity=3, clock=clock)
    with pytest.raises(ValueError, match="timeout must not be negative"):
        bucket.acquire(1, timeout=-0.5)


def test_zero_timeout_succeeds_only_without_waiting(clock):
    bucket = TokenBucket(rate=1, capacity=1, clock=clock)
    assert bucket.acquire(timeout=0) == 0.0
    with pytest.raises(RateLimitExceeded, match=r"retry after 1\.000s"):
        bucket.acquire(timeout=0)


def test_manual_clock_advances_and_records_sleeps_but_never_goes_backwards():
    clock = ManualClock(1.5)
    clock.advance(0)
    clock.sleep(2.0)
    clock.sleep(-1.0)
    assert (clock.now(), clock.sleeps) == (3.5, [2.0, -1.0])
    with pytest.raises(ValueError, match="cannot move a clock backwards by -1s"):
        clock.advance(-1)


def test_system_clock_ignores_non_positive_sleeps():
    clock = SystemClock()
    before = clock.now()
    clock.sleep(-5)
    clock.sleep(0)
    assert 0 <= clock.now() - before < 1
