"""Per-request context: the request id, the body size limit, and one JSON log line per request.

A pure ASGI middleware: it wraps `send` without buffering, so streaming
responses pass through untouched.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import OpenAIError, send_error

REQUEST_ID_HEADER = b"x-request-id"
_VALID_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_QUIET_PATHS = ("/metrics", "/health/")

log = logging.getLogger("gateway.requests")


@dataclass
class RequestRecord:
    """What the log line says about one request; handlers fill in what they learn."""

    request_id: str
    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    model: str | None = None
    endpoint: str | None = None
    triton_request_id: str | None = None
    status: int | None = None
    stream: bool | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    duration_s: float | None = None
    key: str | None = None  # the API key's name, never the key
    client_disconnected: bool = False
    error_type: str | None = None
    prompt: Any = None
    output: str | None = None

    def log_fields(self, include_content: bool) -> dict[str, Any]:
        # A shallow copy: asdict() deep-copies every value, a tenth of a millisecond per request.
        fields = {k: v for k, v in vars(self).items() if k != "started" and v is not None}
        if not include_content:
            fields.pop("prompt", None)
            fields.pop("output", None)
        return fields


def _json_default(value: Any) -> Any:
    """Chat messages are request models; anything else unexpected is logged as text."""
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_none=True)
    return str(value)


def request_record(scope: Scope) -> RequestRecord | None:
    return scope.get("state", {}).get("record")


def _too_large(max_body_bytes: int) -> str:
    return f"The request body is larger than {max_body_bytes} bytes."


def _bounded(receive: Receive, max_body_bytes: int) -> Receive:
    """`receive` for a body of unknown length (chunked): past the limit, a 413 instead of reading on. The server
    enforces a declared Content-Length itself, so only chunked bodies need counting."""
    received = 0

    async def receive_within_limit() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > max_body_bytes:
                # Starlette's exception: FastAPI passes it on while reading a body (it turns others into a 400).
                raise HTTPException(413, _too_large(max_body_bytes))
        return message

    return receive_within_limit


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int, log_content: bool = False) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.log_content = log_content

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, REQUEST_ID_HEADER)
        given_text = given.decode("latin-1") if given else ""
        request_id = given_text if _VALID_ID.match(given_text) else uuid.uuid4().hex
        record = RequestRecord(request_id, scope["method"], scope["path"])
        scope.setdefault("state", {})["record"] = record
        id_header = (REQUEST_ID_HEADER, request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        try:
            length = _header(scope, b"content-length")
            if length is None:
                receive = _bounded(receive, self.max_body_bytes)
            elif length.isdigit() and int(length) > self.max_body_bytes:
                await send_error(send_with_id, OpenAIError(413, _too_large(self.max_body_bytes)))
                return
            await self.app(scope, receive, send_with_id)
        finally:
            record.duration_s = round(time.perf_counter() - record.started, 6)
            if not scope["path"].startswith(_QUIET_PATHS):
                log.info(orjson.dumps(record.log_fields(self.log_content), default=_json_default).decode())
