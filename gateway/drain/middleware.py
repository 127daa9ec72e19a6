"""The drain at the HTTP edge: counts the generations in flight, and refuses new ones once draining.

A pure ASGI middleware, so a streamed response counts until its last byte is handed to the server.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.drain.state import Drain, shutting_down

_CLOSE = (b"connection", b"close")


# vLLM's tokenizer endpoints, outside /v1: they reach Triton like a generation.
_UPSTREAM_PATHS = ("/tokenize", "/detokenize")


def is_generation(scope: Scope) -> bool:
    """Work the drain waits for and refuses: every POST under /v1 (completions, chat, and those to come) and the
    tokenizer endpoints."""
    return scope["method"] == "POST" and (scope["path"].startswith("/v1/") or scope["path"] in _UPSTREAM_PATHS)


class DrainMiddleware:
    def __init__(self, app: ASGIApp, drain: Drain, on_refused: Callable[[], None] | None = None) -> None:
        self.app = app
        self.drain = drain
        self.on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        generation = is_generation(scope)
        if self.drain.draining:
            if generation:
                await self._refuse(send)
            else:  # probes and metrics still answer; the client should reconnect elsewhere
                await self.app(scope, receive, _closing(send))
            return
        if not generation:
            await self.app(scope, receive, send)
            return
        self.drain.enter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.drain.leave()

    async def _refuse(self, send: Send) -> None:
        if self.on_refused is not None:
            self.on_refused()
        body = orjson.dumps(shutting_down().body())
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), _CLOSE]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _closing(send: Send) -> Send:
    """`send`, with `Connection: close` added to the response's headers."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
        await send(message)

    return wrapped
