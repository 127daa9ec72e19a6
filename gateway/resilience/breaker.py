"""A circuit breaker per model and replica: after N consecutive UNAVAILABLE answers, fail fast for a cool-down.

With several replicas an open breaker is also the replica's ejection for that model (outlier detection): the
picker skips it until its cool-down ends and a probe succeeds. Each failed probe doubles the cool-down, up to
`MAX_BACKOFF` times the configured one; a success resets it.

Pure: the clock is injected and nothing here does I/O. The Triton client reports each request's outcome and
asks before each request; readiness reads which breakers are open.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_BACKOFF = 8


class BreakerState(enum.Enum):
    CLOSED = "closed"  # requests go through; UNAVAILABLE answers are counted
    OPEN = "open"  # requests fail fast until the cool-down ends
    HALF_OPEN = "half_open"  # one probe request goes through; its outcome closes or reopens the breaker


@dataclass
class CircuitBreaker:
    failures_to_open: int
    cooldown_s: float
    clock: Callable[[], float] = time.monotonic
    state: BreakerState = BreakerState.CLOSED
    consecutive_failures: int = 0
    opened_at: float = 0.0
    probing: bool = False  # half-open: the probe is in flight
    backoff: int = 1  # the cool-down's multiplier: doubled by each failed probe
    on_open: Callable[[], None] | None = None

    @property
    def current_cooldown_s(self) -> float:
        return self.cooldown_s * self.backoff

    def admit(self) -> float | None:
        """None when a request may go to Triton; otherwise the seconds after which to retry."""
        if self.state is BreakerState.CLOSED:
            return None
        if self.state is BreakerState.OPEN:
            left = self.opened_at + self.current_cooldown_s - self.clock()
            if left > 0:
                return left
            self.state, self.probing = BreakerState.HALF_OPEN, False
        if self.probing:  # one probe at a time; the others wait for its verdict
            return self.cooldown_s
        self.probing = True
        return None

    def record_success(self) -> None:
        """A request ended with an answer other than UNAVAILABLE: Triton is reachable, the count starts over."""
        self.state, self.consecutive_failures, self.probing, self.backoff = BreakerState.CLOSED, 0, False, 1

    def record_reachable(self) -> None:
        """A stream's first response: a probe's success closes the breaker at once, without waiting for the
        stream's end. While closed, the count is left alone: streams that answered and then died with
        UNAVAILABLE (Triton killed under them) must still add up and open the breaker."""
        if self.state is not BreakerState.CLOSED:
            self.record_success()

    def record_unavailable(self) -> None:
        if self.state is BreakerState.HALF_OPEN:
            self.backoff = min(self.backoff * 2, MAX_BACKOFF)
            self._open()
            return
        self.consecutive_failures += 1
        if self.state is BreakerState.CLOSED and self.consecutive_failures >= self.failures_to_open:
            self._open()

    def record_abandoned(self) -> None:
        """A request ended without a verdict (its client left, a deadline fired): a probe slot frees up."""
        if self.state is BreakerState.HALF_OPEN:
            self.probing = False

    def is_open(self) -> bool:
        """Open and still cooling down: requests fail fast."""
        return self.state is BreakerState.OPEN and self.clock() < self.opened_at + self.current_cooldown_s

    def _open(self) -> None:
        self.state, self.opened_at, self.probing = BreakerState.OPEN, self.clock(), False
        if self.on_open is not None:
            self.on_open()


@dataclass
class BreakerBoard:
    """One breaker per model, made on first use. `failures_to_open` 0 turns breaking off."""

    failures_to_open: int
    cooldown_s: float
    clock: Callable[[], float] = time.monotonic
    on_open: Callable[[str], None] | None = None  # told the model whose breaker opened
    breakers: dict[str, CircuitBreaker] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.failures_to_open > 0

    def for_model(self, model: str) -> CircuitBreaker:
        breaker = self.breakers.get(model)
        if breaker is None:
            on_open = None if self.on_open is None else (lambda notify=self.on_open: notify(model))
            breaker = CircuitBreaker(self.failures_to_open, self.cooldown_s, self.clock, on_open=on_open)
            self.breakers[model] = breaker
        return breaker

    def reset(self) -> None:
        """Every breaker closed, cool-downs forgotten: the replica answered again after an outage."""
        self.breakers.clear()

    def open_models(self) -> list[str]:
        return sorted(model for model, breaker in self.breakers.items() if breaker.is_open())
