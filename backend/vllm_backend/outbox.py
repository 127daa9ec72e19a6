"""Sends responses to Triton from threads of their own.

A response sender's `send` is a round trip to the Triton process. Made on the asyncio loop that also
reads the engine's outputs, each one would hold up every other request's tokens; made here, the loop
goes on while Triton takes the response. The stub releases the GIL while it waits for Triton, and Triton
takes each response on a pool of its own threads, so several sender threads overlap their round trips:
with one, a card running hundreds of streams waits on the path, not the engine. Each request keeps to one
thread, first in first out: its responses keep their order, and its final response comes last. `on_sent`
tells the request its response was handed over (see relay.py: the request pulls its next output only then).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

_Item = tuple[Any, Any, int, Callable[[], None] | None]  # (response sender, response or None, flags, on_sent)
_MIX = 0x9E3779B97F4A7C15  # spreads object addresses, which share their low bits, over the threads


class Outbox:
    def __init__(self, on_error: Callable[[str], None], threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"an outbox needs at least one sender thread, got {threads}")
        self._on_error = on_error
        self._queues: list[queue.SimpleQueue[_Item | None]] = [queue.SimpleQueue() for _ in range(threads)]
        names = ["vllm-backend-sender"] if threads == 1 else [f"vllm-backend-sender-{i}" for i in range(threads)]
        self._threads = [
            threading.Thread(target=self._run, args=(lane,), name=name, daemon=True)
            for lane, name in zip(self._queues, names)
        ]
        for thread in self._threads:
            thread.start()

    def _lane(self, sender: Any) -> queue.SimpleQueue[_Item | None]:
        return self._queues[((id(sender) * _MIX) >> 32) % len(self._queues)]

    def send(
        self, sender: Any, response: Any = None, flags: int = 0, on_sent: Callable[[], None] | None = None
    ) -> None:
        """Queues `sender.send(response, flags=flags)`, then `on_sent()` even if that failed; returns at once."""
        self._lane(sender).put((sender, response, flags, on_sent))

    def close(self, timeout_s: float = 10.0) -> None:
        """Sends what is queued, then stops the threads."""
        for lane in self._queues:
            lane.put(None)
        for thread in self._threads:
            thread.join(timeout=timeout_s)

    def _run(self, lane: queue.SimpleQueue[_Item | None]) -> None:
        while (item := lane.get()) is not None:
            sender, response, flags, on_sent = item
            try:
                sender.send(response, flags=flags)
            except Exception as exc:  # e.g. a request Triton has already ended; the others go on
                self._on_error(f"[vllm] could not send a response: {exc}")
            if on_sent is not None:
                on_sent()
