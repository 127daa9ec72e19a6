"""A request's engine outputs to its responses, at most one response in flight at a time.

Each response costs the stub, Triton's front end and the gateway tens of microseconds of CPU, whatever it
carries. So a request that has its next output while its previous response is still waiting for the
sender thread waits too, and pulls nothing more from the engine meanwhile: vLLM's own collector
(`RequestOutputCollector`, streaming DELTA outputs) merges what the engine produces for the request,
texts concatenated, token ids and logprobs appended, the latest cumulative logprob and finish reason
kept, and the next pull takes it all as one output. The first output never waits, and when the sender
keeps up (an idle server) every output goes out at once, alone, with no wake-up from the sender thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Callable, TypeVar

Response = TypeVar("Response")
OnSent = Callable[[], None]


def _settle(future: asyncio.Future) -> None:
    if not future.done():  # a request cancelled meanwhile no longer waits
        future.set_result(None)


class Handover:
    """One request's response in flight. The sender thread marks it sent; the loop waits for that only if
    it has the request's next response first, and only then is the loop woken from the sender thread.

    The two threads meet in two attributes, each written by one side and read by the other after writing
    its own (`sent` then `waiter` in the sender, `waiter` then `sent` in the loop), so whichever comes
    second sees the other: a waiter is always woken, and nobody waits for a response already sent.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.sent = True
        self.waiter: asyncio.Future | None = None

    def start(self) -> OnSent:
        """A response goes out: the callable, for the sender thread, marks it sent."""
        self.sent, self.waiter = False, None
        return self._mark_sent

    def _mark_sent(self) -> None:
        self.sent = True
        waiter = self.waiter
        if waiter is not None:
            try:
                self.loop.call_soon_threadsafe(_settle, waiter)
            except RuntimeError:  # the loop is closed: the model is being unloaded
                pass

    async def wait(self) -> None:
        """Returns once the response in flight (if any) has been handed to Triton."""
        if self.sent:
            return
        self.waiter = self.loop.create_future()
        if not self.sent:
            await self.waiter


# The longest a paced request waits between two pulls, however many requests run.
MAX_PACE_S = 0.5


def pace_interval(running: int, busy_above: int, responses_per_s: float) -> float:
    """Seconds between two pulls of a streamed request's outputs: none up to `busy_above` running requests; above,
    `running / responses_per_s`, so that all of them together send about `responses_per_s` responses a second
    (at most `MAX_PACE_S`). 0 `responses_per_s` turns pacing off."""
    if responses_per_s <= 0 or running <= busy_above:
        return 0.0
    return min(running / responses_per_s, MAX_PACE_S)


class Pacer:
    """Under load, a request pulls its next output from the engine only on a tick shared by every request.

    Each response costs the stub, Triton and the gateway the same CPU whatever it carries, and at hundreds of
    streams they spend more per token than the engine. Above `busy_above` running requests, what the engine
    makes for a request between two ticks merges into one response (vLLM's collector), like vLLM's
    `stream_interval` but in time and only when busy. The tick grows with the requests running
    (`pace_interval`), so the responses a second stay about the same however many streams share them: the path
    keeps its CPU cost bounded while the engine's token rate goes up. Below the threshold nothing waits, so an
    idle server streams token by token. One timer serves every waiting request."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, responses_per_s: float, busy_above: int, running: Callable[[], int]
    ) -> None:
        self.loop = loop
        self.responses_per_s = responses_per_s
        self.busy_above = busy_above
        self.running = running
        self._tick: asyncio.Future | None = None

    async def wait(self) -> None:
        tick = self._tick
        if tick is None or tick.done():
            interval_s = pace_interval(self.running(), self.busy_above, self.responses_per_s)
            if interval_s <= 0:
                return
            tick = self._tick = self.loop.create_future()
            self.loop.call_later(interval_s, _settle, tick)
        await asyncio.shield(tick)  # a cancelled request must not cancel the others' tick


async def _no_pace() -> None:
    return None


async def relay(
    outputs: AsyncIterator[Any],
    to_response: Callable[[Any], Response],
    deliver: Callable[[Response, OnSent], None],
    loop: asyncio.AbstractEventLoop,
    pace: Callable[[], Awaitable[None]] = _no_pace,
) -> Response | None:
    """Delivers each intermediate output's response once the previous one was handed over, then waits for
    `pace` before pulling the next; returns the finished output's response (None if the outputs end
    unfinished), for the caller to send as the final response after them. Reads `outputs` to its end: a
    generator left open would be aborted later."""
    handover = Handover(loop)
    final = None
    async for output in outputs:
        response = to_response(output)
        if output.finished:
            final = response
            continue
        await handover.wait()
        deliver(response, handover.start())
        await pace()
    return final
