"""Ending a request's work when its client goes away, with one small task per request.

Starlette's StreamingResponse watches for the disconnect through an anyio task group whenever the
server announces ASGI below 2.4 (uvicorn does); setting it up and cancelling it (the cancel message
formats the task's repr) cost more per request than the rest of the response machinery.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class DisconnectWatch:
    """Within `async with`, a client disconnect cancels the current task; the cancellation stops at
    the block's end, which `disconnected` then reports."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._task: asyncio.Task[object] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.disconnected = False

    async def __aenter__(self) -> DisconnectWatch:
        self._task = asyncio.current_task()
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self.disconnected = True
        assert self._task is not None
        self._task.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        assert self._watcher is not None and self._task is not None
        self._watcher.cancel()
        if not self.disconnected:
            return False
        # Our own cancellation ends here; one from elsewhere (a server shutting down) goes on.
        return self._task.uncancel() == 0 and exc_type is not None and issubclass(exc_type, asyncio.CancelledError)


class EventStreamResponse(StreamingResponse):
    """A streamed body that stops, closing its iterator, as soon as the client disconnects."""

    media_type = "text/event-stream"

    def __init__(self, content: Any, *, on_close: Callable[[], Awaitable[None]] | None = None, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close  # runs however the response ends: finished, failed or disconnected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with DisconnectWatch(receive):
                await self.stream_response(send)
        finally:
            if self._on_close is not None:
                await self._on_close()
        if self.background is not None:
            await self.background()
