"""Cancelled requests, found by one pass over the running requests per interval.

Whether Triton cancelled a request (a closed gRPC stream, its cancellation API) is a round trip to the
Triton process per question, so it is asked neither per output nor by a task per request: one task asks
about every running request once per interval and aborts the cancelled ones in the engine, which then
ends their output streams. Each abort is logged once it is on its way to the engine: the line tells an operator
that a client went away, and a test that the engine will drop the request when it next runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Running:
    is_cancelled: Callable[[], bool]  # the request's response sender's question to Triton
    abort: Callable[[], Awaitable[None]]  # aborts the request in the engine that runs it


def cancelled(running: dict[str, Running]) -> list[str]:
    """The ids of the requests Triton says were cancelled. A request Triton no longer knows counts as
    cancelled: nobody is waiting for it."""
    found = []
    for request_id, entry in list(running.items()):  # the loop may add requests between questions
        try:
            gone = entry.is_cancelled()
        except Exception:
            gone = True
        if gone:
            found.append(request_id)
    return found


ABORTED = "cancelled in Triton: aborted in the engine"  # the line's text, after the request's id


class CancelWatch:
    """The running requests, and the task that aborts the cancelled ones within `interval_s`."""

    def __init__(
        self, interval_s: float, on_error: Callable[[str], None], on_info: Callable[[str], None] = lambda _: None
    ) -> None:
        self.interval_s = interval_s
        self.running: dict[str, Running] = {}
        self._on_error = on_error
        self._on_info = on_info

    def add(self, request_id: str, is_cancelled: Callable[[], bool], abort: Callable[[], Awaitable[None]]) -> None:
        self.running[request_id] = Running(is_cancelled, abort)

    def discard(self, request_id: str) -> None:
        self.running.pop(request_id, None)

    async def abort_cancelled(self) -> None:
        """One pass: every running request asked once, the cancelled ones aborted (and no longer asked)."""
        for request_id in cancelled(self.running):
            entry = self.running.pop(request_id, None)
            if entry is None:  # it ended while an earlier abort was awaited
                continue
            try:
                await entry.abort()
            except Exception as exc:  # a dead engine; the request's own task reports that
                self._on_error(f"[vllm] could not abort request {request_id}: {exc!r}")
            else:
                self._on_info(f"[vllm] request {request_id} {ABORTED}")

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.abort_cancelled()
