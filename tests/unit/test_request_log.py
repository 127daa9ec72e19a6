"""The request log line: one JSON object per request, content only when asked for."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from gateway.observability.request_context import RequestContextMiddleware, request_record
from gateway.protocol import ChatMessage


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    record = request_record(scope)
    assert record is not None
    record.prompt = [ChatMessage(role="user", content="héllo")]
    record.output = "wörld"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def _log_line(caplog: pytest.LogCaptureFixture, log_content: bool) -> dict:
    app = RequestContextMiddleware(_app, max_body_bytes=1000, log_content=log_content)
    caplog.set_level(logging.INFO, logger="gateway.requests")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        reply = await client.post("/v1/chat/completions", json={}, headers={"x-request-id": "abc-1"})
    assert reply.headers["x-request-id"] == "abc-1"
    [record] = [r for r in caplog.records if r.name == "gateway.requests"]
    return json.loads(record.getMessage())


async def test_content_is_logged_when_asked_for(caplog: pytest.LogCaptureFixture) -> None:
    line = await _log_line(caplog, log_content=True)
    assert line["request_id"] == "abc-1" and line["status"] == 200
    assert line["prompt"] == [{"role": "user", "content": "héllo"}]
    assert line["output"] == "wörld"


async def test_content_is_left_out_by_default(caplog: pytest.LogCaptureFixture) -> None:
    line = await _log_line(caplog, log_content=False)
    assert "prompt" not in line and "output" not in line
    assert line["path"] == "/v1/chat/completions" and line["duration_s"] >= 0
