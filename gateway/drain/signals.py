"""Holding the stop signal back from uvicorn until the drain is over.

On SIGTERM or SIGINT, uvicorn closes its listening socket at once, then waits for open responses; how it
treats open streams has changed between releases (a change that cut them on shutdown was released and then
reverted in 2026). So each worker takes both signals over while it serves: the first starts the drain
(readiness and new generations get 503, those in flight go on), and once they have ended, or been cut at
the deadline, the signal goes to the handler uvicorn had installed, which then stops a server with nothing
left to wait for. A second SIGINT (Ctrl-C again) cuts at once; further SIGTERMs change nothing.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from gateway.drain.metrics import DrainMetrics
from gateway.drain.state import Drain

# uvicorn's own logger: the drain's lines then read in order with its "Shutting down" ones.
log = logging.getLogger("uvicorn.error")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# After the cut, how long the cut streams get to write their error event and [DONE].
CUT_GRACE_S = 2.0
# Then what uvicorn's own shutdown gives the responses still open (none should be generations).
SERVER_GRACE_S = 5


class SignalDrain:
    def __init__(self, drain: Drain, cut: Callable[[], int], metrics: DrainMetrics) -> None:
        self.drain = drain
        self.cut = cut
        self.metrics = metrics
        self._previous: dict[int, Any] = {}
        self._seen: list[int] = []
        self._task: asyncio.Task[None] | None = None

    def install(self) -> bool:
        """Takes the stop signals over from the server; False, doing nothing, outside the main thread (where
        signals cannot be handled, as in tests that run the app in a thread)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        loop = asyncio.get_running_loop()

        def handler(signum: int, frame: object) -> None:
            loop.call_soon_threadsafe(self._on_signal, signum)

        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, handler)
        return True

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    async def close(self) -> None:
        """At shutdown: the server's handlers back, and a drain still running (a shutdown not caused by a
        signal) stopped."""
        self._restore()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _on_signal(self, signum: int) -> None:
        again = signum in self._seen
        self._seen.append(signum)
        if self.drain.begin():
            self._task = asyncio.get_running_loop().create_task(self._drain_then_stop(signum))
        elif again and signum == signal.SIGINT:
            log.warning("second SIGINT: cutting the generations in flight now")
            self.drain.hurry()

    async def _drain_then_stop(self, signum: int) -> None:
        started = time.monotonic()
        self.metrics.draining.set(1)
        log.info(
            "%s: draining %d generation(s) in flight, for up to %.0f s",
            signal.Signals(signum).name,
            self.drain.in_flight,
            self.drain.timeout_s,
        )
        if not await self.drain.wait(self.drain.timeout_s):
            cut = self.cut()
            self.metrics.cut.inc(cut)
            log.warning("drain deadline: cut %d generation(s) still running", cut)
            await self.drain.wait(CUT_GRACE_S, hurry_ends_it=False)
        log.info("drained in %.1f s; stopping", time.monotonic() - started)
        # The server's own handler, back in place, gets the signal as if it came now.
        self._restore()
        signal.raise_signal(signum)
