"""A request's engine outputs to its responses, one response in flight at a time.

Each response costs the stub, Triton's front end and the gateway tens of microseconds of CPU, whatever it
carries. So the next output is pulled from the engine only once the previous response has been handed to
Triton: while the sender thread is busy, vLLM's own collector (`RequestOutputCollector`, streaming DELTA
outputs) merges what the engine produces for the request, texts concatenated, token ids and logprobs
appended, the latest cumulative logprob and finish reason kept. The first output never waits, and on an
idle server each response is handed over before the next token comes, so every token goes out alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from functools import partial
from typing import Any, Callable, TypeVar

Response = TypeVar("Response")


async def relay(
    outputs: AsyncIterator[Any],
    to_response: Callable[[Any], Response],
    deliver: Callable[[Response], Awaitable[None]],
) -> Response | None:
    """Delivers each intermediate output's response and waits for it before pulling the next output;
    returns the finished output's response (None if the outputs end unfinished), for the caller to send
    as the final response. Reads `outputs` to its end: a generator left open would be aborted later."""
    final = None
    async for output in outputs:
        response = to_response(output)
        if output.finished:
            final = response
        else:
            await deliver(response)
    return final


def _settle(future: asyncio.Future) -> None:
    if not future.done():  # a request cancelled meanwhile no longer waits
        future.set_result(None)


def settler(loop: asyncio.AbstractEventLoop, future: asyncio.Future) -> Callable[[], None]:
    """A callable for another thread that resolves `future` on its loop. A loop already closed (the model
    is being unloaded) has nobody waiting."""

    def settle() -> None:
        try:
            loop.call_soon_threadsafe(partial(_settle, future))
        except RuntimeError:
            pass

    return settle
