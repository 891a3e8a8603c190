import pytest

from throttle import FixedWindow, ManualClock, SlidingWindowCounter, SlidingWindowLog


def test_fixed_window_counts_within_a_window():
    clock = ManualClock(0.0)
    limiter = FixedWindow(limit=3, window=10, clock=clock)
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert limiter.remaining == 0


def test_fixed_window_resets_exactly_at_the_boundary():
    clock = ManualClock(0.0)
    limiter = FixedWindow(limit=2, window=10, clock=clock)
    assert limiter.try_acquire(2) is True
    clock.advance(9.999)
    assert limiter.try_acquire() is False
    clock.advance(0.001)
    assert limiter.try_acquire() is True
    assert limiter.remaining == 1


def test_fixed_windows_are_aligned_to_the_clock_not_the_first_request():
    clock = ManualClock(7.0)
    limiter = FixedWindow(limit=1, window=10, clock=clock)
    assert limiter.try_acquire() is True
    assert limiter.time_until_available() == pytest.approx(3.0)
    clock.advance(3.0)
    assert limiter.try_acquire() is True


def test_fixed_window_allows_double_the_limit_across_a_boundary():
    clock = ManualClock(9.5)
    limiter = FixedWindow(limit=5, window=10, clock=clock)
    assert limiter.try_acquire(5) is True
    clock.advance(0.5)
    assert limiter.try_acquire(5) is True


def test_fixed_window_acquire_waits_for_next_window():
    clock = ManualClock(20.0)
    limiter = FixedWindow(limit=2, window=10, clock=clock)
    limiter.try_acquire(2)
    clock.advance(4.0)
    assert limiter.acquire() == pytest.approx(6.0)
    assert clock.now() == pytest.approx(30.0)
    assert limiter.remaining == 1


def test_fixed_window_handles_float_boundaries():
    clock = ManualClock(0.0)
    limiter = FixedWindow(limit=1, window=0.1, clock=clock)
    for _ in range(3):
        clock.advance(0.1)
    assert limiter.try_acquire() is True
    assert limiter.time_until_available() == pytest.approx(0.1)


def test_sliding_log_expires_grants_exactly_one_window_later():
    clock = ManualClock(0.0)
    limiter = SlidingWindowLog(limit=2, window=10, clock=clock)
    limiter.try_acquire()
    clock.advance(4)
    limiter.try_acquire()
    assert limiter.try_acquire() is False
    assert limiter.time_until_available() == pytest.approx(6.0)
    clock.advance(5.999)
    assert limiter.try_acquire() is False
    clock.advance(0.001)
    assert limiter.in_window == 1
    assert limiter.try_acquire() is True


def test_sliding_log_wait_accounts_for_sizes_of_oldest_grants():
    clock = ManualClock(0.0)
    limiter = SlidingWindowLog(limit=10, window=60, clock=clock)
    limiter.try_acquire(3)
    clock.advance(10)
    limiter.try_acquire(4)
    clock.advance(10)
    limiter.try_acquire(3)
    assert limiter.time_until_available(1) == pytest.approx(40.0)
    assert limiter.time_until_available(3) == pytest.approx(40.0)
    assert limiter.time_until_available(4) == pytest.approx(50.0)
    assert limiter.time_until_available(8) == pytest.approx(60.0)


def test_sliding_log_has_no_boundary_burst():
    clock = ManualClock(9.5)
    limiter = SlidingWindowLog(limit=5, window=10, clock=clock)
    assert limiter.try_acquire(5) is True
    clock.advance(0.5)
    assert limiter.try_acquire() is False
    assert limiter.acquire() == pytest.approx(9.5)


def test_sliding_counter_weights_previous_window_by_overlap():
    clock = ManualClock(0.0)
    limiter = SlidingWindowCounter(limit=10, window=60, clock=clock)
    limiter.try_acquire(8)
    clock.advance(60)
    assert limiter.estimate() == pytest.approx(8.0)
    clock.advance(15)
    assert limiter.estimate() == pytest.approx(6.0)
    assert limiter.try_acquire(4) is True
    assert limiter.estimate() == pytest.approx(10.0)
    assert limiter.try_acquire(1) is False


def test_sliding_counter_waits_for_previous_window_to_decay():
    clock = ManualClock(0.0)
    limiter = SlidingWindowCounter(limit=10, window=60, clock=clock)
    limiter.try_acquire(8)
    clock.advance(60)
    assert limiter.time_until_available(2) == 0.0
    assert limiter.time_until_available(3) == pytest.approx(7.5)
    assert limiter.time_until_available(10) == pytest.approx(60.0)
    assert limiter.acquire(3) == pytest.approx(7.5)


def test_sliding_counter_waits_into_next_window_when_current_is_full():
    clock = ManualClock(0.0)
    limiter = SlidingWindowCounter(limit=10, window=60, clock=clock)
    clock.advance(30)
    limiter.try_acquire(8)
    # In the next window the 8 decay linearly; 4 more fit once 8 * (1 - e/60) <= 6.
    assert limiter.time_until_available(4) == pytest.approx(30 + 15)
    assert limiter.time_until_available(10) == pytest.approx(90.0)
    assert limiter.acquire(4) == pytest.approx(45.0)
    assert limiter.estimate() == pytest.approx(10.0)


def test_sliding_counter_forgets_previous_after_an_idle_window():
    clock = ManualClock(0.0)
    limiter = SlidingWindowCounter(limit=5, window=10, clock=clock)
    limiter.try_acquire(5)
    clock.advance(20)
    assert limiter.estimate() == 0.0
    assert limiter.try_acquire(5) is True


@pytest.mark.parametrize("cls", [FixedWindow, SlidingWindowLog, SlidingWindowCounter])
def test_window_limiters_validate_configuration(cls):
    with pytest.raises(ValueError, match="limit must be a positive integer, got 0"):
        cls(limit=0, window=1, clock=ManualClock())
    with pytest.raises(ValueError, match="window must be a positive finite number, got -1"):
        cls(limit=1, window=-1, clock=ManualClock())
    with pytest.raises(ValueError, match="cannot acquire 3 permits; capacity is 2"):
        cls(limit=2, window=1, clock=ManualClock()).try_acquire(3)


def test_fresh_sliding_counter_allows_the_full_limit_at_once():
    clock = ManualClock(0.0)
    limiter = SlidingWindowCounter(limit=4, window=10, clock=clock)
    assert limiter.estimate() == 0.0
    assert limiter.try_acquire(4) is True
    assert limiter.try_acquire(1) is False
