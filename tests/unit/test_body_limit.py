"""The body limit: a declared Content-Length past it, or a chunked body that grows past it, gets a 413 in OpenAI's
shape before the handler sees the body."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI, Request

from gateway.errors import install_error_handlers
from gateway.observability.request_context import RequestContextMiddleware

LIMIT = 1000


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        return {"size": len(await request.body())}

    app.add_middleware(RequestContextMiddleware, max_body_bytes=LIMIT)
    return app


async def _chunks(total: int, size: int = 100) -> AsyncIterator[bytes]:
    """A body sent without Content-Length (chunked), as a streaming client sends one."""
    for start in range(0, total, size):
        yield b"x" * min(size, total - start)


async def _post(content: bytes | AsyncIterator[bytes]) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app()), base_url="http://t") as client:
        return await client.post("/echo", content=content)


async def test_a_chunked_body_past_the_limit_gets_a_413() -> None:
    response = await _post(_chunks(LIMIT + 1))
    assert response.status_code == 413
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and str(LIMIT) in error["message"]


async def test_a_chunked_body_within_the_limit_is_read_whole() -> None:
    response = await _post(_chunks(LIMIT))
    assert response.status_code == 200 and response.json() == {"size": LIMIT}


async def test_a_declared_length_past_the_limit_gets_a_413() -> None:
    response = await _post(b"x" * (LIMIT + 1))
    assert response.status_code == 413 and response.json()["error"]["type"] == "invalid_request_error"
