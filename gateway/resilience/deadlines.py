"""Deadlines inside one Triton stream: time to the first response, and the longest gap between responses.

The total deadline is gRPC's own (the call's timeout). These two need a timer, and the streaming path is hot:
one timer per stream, armed once and moved lazily. Each response only stores its arrival time; when the
timer fires it checks whether the deadline really passed, and if not, sets itself for the new due time. A
stream that keeps flowing thus costs one clock read per response and one timer event per stall period.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

DeadlineKind = Literal["first_token", "stall", "total"]


@dataclass(frozen=True)
class StreamDeadlines:
    """None turns a deadline off."""

    first_token_s: float | None = None
    stall_s: float | None = None

    @property
    def enabled(self) -> bool:
        return self.first_token_s is not None or self.stall_s is not None

    def due(self, started: float, last_response: float | None) -> tuple[float, DeadlineKind] | None:
        """When the stream's next deadline falls, and which one; None when none is set for this phase."""
        if last_response is None:
            return (started + self.first_token_s, "first_token") if self.first_token_s is not None else None
        return (last_response + self.stall_s, "stall") if self.stall_s is not None else None


class DeadlineWatch:
    """The timer of one stream: `on_response()` per response; `on_fire(kind)` runs once if a deadline passes.
    `stop()` when the stream ends."""

    __slots__ = ("_deadlines", "_loop", "_on_fire", "_started", "last_response", "_handle", "fired")

    def __init__(
        self,
        deadlines: StreamDeadlines,
        loop: asyncio.AbstractEventLoop,
        on_fire: Callable[[DeadlineKind], None],
    ) -> None:
        self._deadlines = deadlines
        self._loop = loop
        self._on_fire = on_fire
        self._started = loop.time()
        self.last_response: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self.fired: DeadlineKind | None = None
        self._arm()

    def on_response(self) -> None:
        first = self.last_response is None
        self.last_response = self._loop.time()
        if first and self.fired is None:  # from the first-token deadline to the stall deadline
            self.stop()
            self._arm()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self) -> None:
        due = self._deadlines.due(self._started, self.last_response)
        if due is not None:
            self._handle = self._loop.call_at(due[0], self._check)

    def _check(self) -> None:
        self._handle = None
        due = self._deadlines.due(self._started, self.last_response)
        if due is None:
            return
        at, kind = due
        if self._loop.time() < at:  # responses came meanwhile: the deadline moved
            self._handle = self._loop.call_at(at, self._check)
            return
        self.fired = kind
        self._on_fire(kind)
