"""Which models Triton serves, and their context lengths: refreshed in the background, read from memory on the hot
path.

A request never asks Triton's repository index on its own. Under load Triton's gRPC front end answers
slowly, and hundreds of requests each asking it (each under the health timeout) failed with 504s before
they reached a model. A model not in the map (just loaded, or misspelt) triggers one refresh that every
request waiting on it shares, and at most one refresh is in flight at any time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from gateway.errors import OpenAIError

log = logging.getLogger("gateway.models")


@dataclass(frozen=True)
class ModelEntry:
    name: str
    version: str
    state: str
    max_model_len: int | None = None  # known once the backend answered for this READY version


Fetch = Callable[[], Awaitable[list[ModelEntry]]]
AskContextLength = Callable[[str, str], Awaitable[int]]


def ready_names(entries: list[ModelEntry]) -> frozenset[str]:
    return frozenset(entry.name for entry in entries if entry.state == "READY")


class ContextLengths:
    """Each READY model version's `max_model_len`, asked of its backend once (a tokenize-only request) and kept while
    the version stays READY, since a reload may change it. A backend that refuses the question (one older than
    tokenize-only requests) is not asked again for that version; one that cannot answer now is asked at the next
    refresh."""

    def __init__(self, ask: AskContextLength) -> None:
        self._ask = ask
        self._known: dict[tuple[str, str], int | None] = {}

    async def annotate(self, entries: list[ModelEntry]) -> list[ModelEntry]:
        ready = {(entry.name, entry.version) for entry in entries if entry.state == "READY"}
        self._known = {key: value for key, value in self._known.items() if key in ready}
        missing = sorted(ready - self._known.keys())
        answers = await asyncio.gather(*(self._ask(*key) for key in missing), return_exceptions=True)
        for (name, version), answer in zip(missing, answers):
            if isinstance(answer, int):
                self._known[(name, version)] = answer
            elif isinstance(answer, OpenAIError) and answer.status == 400:
                log.warning("model %s version %s does not tell its max_model_len: %s", name, version, answer.message)
                self._known[(name, version)] = None
        return [replace(entry, max_model_len=self._known.get((entry.name, entry.version))) for entry in entries]


class ModelMap:
    """The last repository index Triton gave, and the names of its READY models."""

    def __init__(self, fetch: Fetch, refresh_s: float) -> None:
        self._fetch = fetch
        self.refresh_s = refresh_s
        self.entries: list[ModelEntry] = []
        self.ready: frozenset[str] = frozenset()
        self._inflight: asyncio.Future[list[ModelEntry]] | None = None
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> list[ModelEntry]:
        """A fresh index, shared with every caller that asks while it is on its way. Raises OpenAIError
        when Triton cannot answer; the map then keeps what it had."""
        inflight = self.refresh_soon()
        # Shielded: one caller giving up (its client went away) must not cancel the others' refresh.
        return await asyncio.shield(inflight)

    def refresh_soon(self) -> asyncio.Future[list[ModelEntry]]:
        """Starts a refresh unless one is on its way, for a caller that need not wait for it."""
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._fetch_and_store())
            self._inflight.add_done_callback(self._clear_inflight)
        return self._inflight

    def _clear_inflight(self, future: asyncio.Future[list[ModelEntry]]) -> None:
        self._inflight = None
        if not future.cancelled():
            future.exception()  # retrieved here, so an error no caller awaited is not reported as lost

    async def _fetch_and_store(self) -> list[ModelEntry]:
        entries = await self._fetch()
        self.entries = entries
        self.ready = ready_names(entries)
        return entries

    async def is_served(self, name: str) -> bool:
        """Whether `name` is READY: from memory when it is, after one shared refresh when it is not."""
        if name in self.ready:
            return True
        await self.refresh()
        return name in self.ready

    def start(self) -> None:
        """Keeps the map fresh every `refresh_s` seconds until `stop`."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="model-map-refresh")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        reachable = True
        while True:
            try:
                await self.refresh()
                if not reachable:
                    log.info("Triton's model index is reachable again")
                reachable = True
            except OpenAIError as exc:
                if reachable:  # said once per outage, not every refresh
                    log.warning("cannot refresh the model map, keeping the last one: %s", exc.message)
                reachable = False
            await asyncio.sleep(self.refresh_s)
