"""The floor for the gateway's own cost: a bare Starlette app that streams the same SSE chunks (same
shape and size as the gateway's completion chunks) with no upstream and no validation.

`python -m uvicorn bench.floor_app:app` — uvicorn's default event loop and HTTP parser, as `python -m gateway`
uses them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

WORD = " word"  # what bench/fake_model.py sends per token


def _chunk(base: dict, text: str, finish_reason: str | None) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return b"data: " + orjson.dumps({**base, "choices": [choice]}) + b"\n\n"


async def _events(base: dict, max_tokens: int) -> AsyncIterator[bytes]:
    for _ in range(max_tokens - 1):
        yield _chunk(base, WORD, None)
        # One event-loop turn per chunk, as when chunks arrive one by one from an upstream; without it
        # a stream's chunks would leave in one burst, which no real stream does.
        await asyncio.sleep(0)
    yield _chunk(base, WORD, "length")
    yield b"data: [DONE]\n\n"


async def completions(request: Request) -> Response:
    body = orjson.loads(await request.body())
    max_tokens = int(body.get("max_tokens") or 16)
    base = {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
    }
    if body.get("stream"):
        return StreamingResponse(_events(base, max_tokens), media_type="text/event-stream")
    choice = {"index": 0, "text": WORD * max_tokens, "logprobs": None, "finish_reason": "length"}
    usage = {"prompt_tokens": 0, "completion_tokens": max_tokens, "total_tokens": max_tokens}
    return Response(orjson.dumps({**base, "choices": [choice], "usage": usage}), media_type="application/json")


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]), Route("/health/ready", health)])
