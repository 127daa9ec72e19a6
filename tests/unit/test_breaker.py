from __future__ import annotations

from gateway.resilience.breaker import BreakerBoard, BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _breaker(clock: Clock, failures: int = 3, cooldown_s: float = 10.0) -> CircuitBreaker:
    return CircuitBreaker(failures, cooldown_s, clock)


def test_opens_after_n_consecutive_unavailable_and_fails_fast_for_the_cooldown() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    for _ in range(2):
        assert breaker.admit() is None
        breaker.record_unavailable()
    assert breaker.state is BreakerState.CLOSED and not breaker.is_open()
    breaker.record_unavailable()
    assert breaker.is_open()
    clock.now += 4
    assert breaker.admit() == 6.0  # seconds left: the Retry-After
    clock.now += 5.9
    assert breaker.admit() is not None


def test_a_success_resets_the_count() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    breaker.record_unavailable()
    breaker.record_unavailable()
    breaker.record_success()
    breaker.record_unavailable()
    breaker.record_unavailable()
    assert breaker.state is BreakerState.CLOSED


def test_after_the_cooldown_one_probe_goes_through_and_its_success_closes() -> None:
    clock = Clock()
    breaker = _breaker(clock, failures=1)
    breaker.record_unavailable()
    clock.now += 10
    assert breaker.admit() is None  # the probe
    assert breaker.state is BreakerState.HALF_OPEN and not breaker.is_open()
    assert breaker.admit() == 10.0  # others wait for the probe's verdict
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.admit() is None and breaker.admit() is None


def test_a_failed_probe_reopens_for_a_new_cooldown() -> None:
    clock = Clock()
    breaker = _breaker(clock, failures=2)
    breaker.record_unavailable()
    breaker.record_unavailable()
    clock.now += 11
    assert breaker.admit() is None
    breaker.record_unavailable()  # one failure is enough when half-open
    assert breaker.is_open()
    assert breaker.admit() == 20.0  # each failed probe doubles the cool-down


def test_an_abandoned_probe_lets_the_next_request_probe() -> None:
    clock = Clock()
    breaker = _breaker(clock, failures=1)
    breaker.record_unavailable()
    clock.now += 10
    assert breaker.admit() is None
    breaker.record_abandoned()  # its client went away: no verdict
    assert breaker.admit() is None
    assert breaker.state is BreakerState.HALF_OPEN


def test_the_board_keeps_one_breaker_per_model_and_lists_the_open_ones() -> None:
    clock = Clock()
    board = BreakerBoard(failures_to_open=1, cooldown_s=5, clock=clock)
    board.for_model("a").record_unavailable()
    assert board.for_model("b").admit() is None
    assert board.open_models() == ["a"]
    clock.now += 5
    assert board.open_models() == []  # cooled down: half-open on the next request, no longer failing fast
    assert not BreakerBoard(0, 5).enabled and board.enabled


def test_streams_that_answered_then_died_unavailable_still_open_the_breaker() -> None:
    """Triton killed under open streams: each had its first response, then ended UNAVAILABLE."""
    clock = Clock()
    breaker = _breaker(clock, failures=3)
    for _ in range(3):
        breaker.record_reachable()
    for _ in range(3):
        breaker.record_unavailable()
    assert breaker.is_open()


def test_a_probes_first_response_closes_the_breaker() -> None:
    clock = Clock()
    breaker = _breaker(clock, failures=1)
    breaker.record_unavailable()
    clock.now += 10
    assert breaker.admit() is None
    breaker.record_reachable()
    assert breaker.state is BreakerState.CLOSED and breaker.admit() is None


def test_failed_probes_back_off_up_to_a_bound_and_a_success_resets() -> None:
    clock = Clock()
    opened: list[int] = []
    breaker = CircuitBreaker(1, 10.0, clock, on_open=lambda: opened.append(1))
    breaker.record_unavailable()
    for expected in (20.0, 40.0, 80.0, 80.0):
        clock.now += breaker.current_cooldown_s
        assert breaker.admit() is None
        breaker.record_unavailable()
        assert breaker.admit() == expected
    assert len(opened) == 5
    clock.now += 80
    assert breaker.admit() is None
    breaker.record_success()
    breaker.record_unavailable()
    assert breaker.admit() == 10.0


def test_reset_forgets_every_open_breaker() -> None:
    board = BreakerBoard(1, 10.0, Clock())
    board.for_model("m").record_unavailable()
    assert board.open_models() == ["m"]
    board.reset()
    assert board.open_models() == [] and board.for_model("m").admit() is None
