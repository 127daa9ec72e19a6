"""Sends responses to Triton from a thread of their own.

A response sender's `send` is a round trip to the Triton process. Made on the asyncio loop that also
reads the engine's outputs, each one would hold up every other request's tokens; made here, the loop
goes on while Triton takes the response. One thread, first in first out: a request's responses keep
their order, and its final response comes last. `on_sent` tells the request its response was handed over
(see relay.py: the request pulls its next output only then).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

_Item = tuple[Any, Any, int, Callable[[], None] | None]  # (response sender, response or None, flags, on_sent)


class Outbox:
    def __init__(self, on_error: Callable[[str], None]) -> None:
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._on_error = on_error
        self._thread = threading.Thread(target=self._run, name="vllm-backend-sender", daemon=True)
        self._thread.start()

    def send(
        self, sender: Any, response: Any = None, flags: int = 0, on_sent: Callable[[], None] | None = None
    ) -> None:
        """Queues `sender.send(response, flags=flags)`, then `on_sent()` even if that failed; returns at once."""
        self._queue.put((sender, response, flags, on_sent))

    def close(self, timeout_s: float = 10.0) -> None:
        """Sends what is queued, then stops the thread."""
        self._queue.put(None)
        self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            sender, response, flags, on_sent = item
            try:
                sender.send(response, flags=flags)
            except Exception as exc:  # e.g. a request Triton has already ended; the others go on
                self._on_error(f"[vllm] could not send a response: {exc}")
            if on_sent is not None:
                on_sent()
