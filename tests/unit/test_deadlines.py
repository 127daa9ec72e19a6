from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.resilience.deadlines import DeadlineKind, DeadlineWatch, StreamDeadlines


class FakeLoop:
    """The two loop methods a DeadlineWatch uses, with time moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[[], None], asyncio.TimerHandle]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        handle = asyncio.TimerHandle(when, callback, (), asyncio.new_event_loop())
        self.timers.append((when, callback, handle))
        return handle

    def advance(self, seconds: float) -> None:
        """Moves time on, running the timers that fall due, in order."""
        self.now += seconds
        while True:
            due = [t for t in self.timers if t[0] <= self.now and not t[2].cancelled()]
            if not due:
                return
            timer = min(due, key=lambda t: t[0])
            self.timers.remove(timer)
            timer[1]()

    @property
    def pending(self) -> int:
        return sum(1 for t in self.timers if not t[2].cancelled())


def _watch(deadlines: StreamDeadlines) -> tuple[FakeLoop, DeadlineWatch, list[DeadlineKind]]:
    loop = FakeLoop()
    fired: list[DeadlineKind] = []
    return loop, DeadlineWatch(deadlines, loop, fired.append), fired  # type: ignore[arg-type]


def test_due_follows_the_stream_phase() -> None:
    both = StreamDeadlines(first_token_s=5, stall_s=2)
    assert both.due(10, None) == (15, "first_token")
    assert both.due(10, 12) == (14, "stall")
    assert StreamDeadlines(stall_s=2).due(10, None) is None
    assert StreamDeadlines(first_token_s=5).due(10, 12) is None
    assert not StreamDeadlines().enabled and both.enabled


def test_first_token_deadline_fires_once_without_a_response() -> None:
    loop, watch, fired = _watch(StreamDeadlines(first_token_s=5, stall_s=2))
    loop.advance(4.9)
    assert fired == []
    loop.advance(0.2)
    assert fired == ["first_token"] and watch.fired == "first_token"
    loop.advance(100)
    assert fired == ["first_token"]


def test_responses_keep_the_stall_deadline_away_with_one_timer() -> None:
    loop, watch, fired = _watch(StreamDeadlines(stall_s=2))
    assert loop.pending == 0  # no first-token deadline: nothing to time before the first response
    for _ in range(50):
        loop.advance(1.5)
        watch.on_response()
    assert fired == []
    assert loop.pending == 1  # re-armed lazily, never one timer per response
    loop.advance(1.9)
    assert fired == []
    loop.advance(0.2)
    assert fired == ["stall"]


def test_the_first_response_moves_from_the_first_token_to_the_stall_deadline() -> None:
    loop, watch, fired = _watch(StreamDeadlines(first_token_s=10, stall_s=1))
    loop.advance(3)
    watch.on_response()
    loop.advance(0.5)
    watch.on_response()
    loop.advance(1.1)  # past the stall deadline, long before the first-token one would fire
    assert fired == ["stall"]


def test_stop_cancels_the_timer() -> None:
    loop, watch, fired = _watch(StreamDeadlines(first_token_s=1))
    watch.stop()
    loop.advance(5)
    assert fired == [] and loop.pending == 0
