"""OpenAI-shaped errors: one exception type and the handlers that render it."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Send

log = logging.getLogger("gateway")

_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    413: "invalid_request_error",
    503: "service_unavailable",
    504: "timeout",
}


class JSONBytesResponse(JSONResponse):
    """A JSON response of plain dicts serialised by orjson. The gateway's bodies are dicts built by its pure
    core, not pydantic models, so FastAPI's response-model path does not apply; FastAPI deprecated its own
    `JSONBytesResponse`."""

    def render(self, content: object) -> bytes:
        return orjson.dumps(content)


class OpenAIError(Exception):
    """An error the client should see, with the HTTP status and OpenAI's error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self.param = param
        self.code = code
        self.headers = dict(headers or {})  # e.g. Retry-After

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


async def send_error(send: Send, error: OpenAIError) -> None:
    """Answers with `error` from a pure ASGI middleware, before any app has run."""
    body = orjson.dumps(error.body())
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(name.lower().encode(), value.encode()) for name, value in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def bad_request(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param)


def model_not_found(model: str) -> OpenAIError:
    return OpenAIError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "Invalid request body.", None
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(loc) or None
    message = first.get("msg", "invalid value")
    if first.get("type") == "json_invalid":
        return "The request body is not valid JSON.", None
    return (f"{param}: {message}" if param else message), param


def install_error_handlers(app: FastAPI) -> None:
    async def openai_error(_: Request, exc: OpenAIError) -> JSONBytesResponse:
        return JSONBytesResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)

    async def validation_error(_: Request, exc: RequestValidationError) -> JSONBytesResponse:
        message, param = _validation_message(exc)
        return JSONBytesResponse(OpenAIError(400, message, param=param).body(), status_code=400)

    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONBytesResponse:
        err = OpenAIError(exc.status_code, str(exc.detail))
        return JSONBytesResponse(err.body(), status_code=exc.status_code)

    async def unexpected_error(_: Request, exc: Exception) -> JSONBytesResponse:
        log.exception("unhandled error")
        err = OpenAIError(500, "The server had an error while processing your request.", type="server_error")
        return JSONBytesResponse(err.body(), status_code=500)

    app.add_exception_handler(OpenAIError, openai_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected_error)
