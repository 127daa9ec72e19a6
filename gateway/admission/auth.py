"""Who is calling: the key table (re-read when its file changes) and the middleware that checks keys.

`/health/*` is always open; `/metrics` is open unless GATEWAY_METRICS_API_KEY is set, and then takes that key
only. Everything else needs a configured key once any is configured. The key's name goes into the request's
log record and the request's `Caller`, which admission fills with the `x-ratelimit-*` headers that this
middleware adds to the response, whatever its status (read from the counters when admission did not see it).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from dataclasses import dataclass, field
from pathlib import Path

import watchfiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.admission.keys import ApiKey, KeyFileError, KeyTable, build_table, digest
from gateway.admission.metrics import NO_KEY, AdmissionMetrics
from gateway.errors import OpenAIError, send_error
from gateway.observability.request_context import request_record

log = logging.getLogger("gateway.admission")

_OPEN_PREFIXES = ("/health/",)
_METRICS_PATH = "/metrics"


@dataclass
class Caller:
    """The key of one request (None when the gateway is open) and the headers its response will carry."""

    key: ApiKey | None
    response_headers: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.key.name if self.key is not None else NO_KEY


def caller_of(scope: Scope) -> Caller:
    return scope.get("state", {}).get("caller") or Caller(None)


class KeyStore:
    """The current key table, from GATEWAY_API_KEYS and GATEWAY_API_KEYS_FILE."""

    def __init__(self, env_keys: str | None, path: str | None) -> None:
        self._env_keys = env_keys
        self.path = Path(path) if path else None
        self._text = self._read()
        self.table = build_table(env_keys, self._text)  # a bad file stops the start-up

    def _read(self) -> str | None:
        return self.path.read_text() if self.path is not None else None

    def reload(self) -> bool:
        """Re-reads the file; a table that fails to parse is logged and the current one kept."""
        try:
            text = self._read()
        except OSError as exc:
            log.error("cannot read the keys file %s (%s); keeping %d keys", self.path, exc, len(self.table.keys))
            return False
        if text == self._text:
            return False
        try:
            self.table = build_table(self._env_keys, text)
        except KeyFileError as exc:
            log.error("keys file %s not loaded: %s; keeping %d keys", self.path, exc, len(self.table.keys))
            return False
        self._text = text
        log.info("keys file %s loaded: %d keys", self.path, len(self.table.keys))
        return True

    async def watch(self, stop: asyncio.Event) -> None:
        """Re-reads the file after any change in its folder (editors and Kubernetes replace files by renaming)."""
        if self.path is None:
            return
        try:
            async for _ in watchfiles.awatch(self.path.parent, debounce=200, stop_event=stop, recursive=False):
                self.reload()
        except Exception:
            log.exception("stopped watching the keys file %s; the keys in force stay", self.path)


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() != "bearer":
                return None
            return token.strip() or None
    return None


def _unauthorized(presented: str | None) -> OpenAIError:
    message = "Incorrect API key provided." if presented else "You didn't provide an API key (Authorization: Bearer)."
    return OpenAIError(
        401, message, type="invalid_request_error", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
    )


class AuthMiddleware:
    def __init__(self, app: ASGIApp, keys: KeyStore, metrics_key: str | None, metrics: AdmissionMetrics) -> None:
        self.app = app
        self.keys = keys
        self._metrics_digest = digest(metrics_key) if metrics_key else None
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path.startswith(_OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        presented = _bearer(scope)
        if path == _METRICS_PATH:
            if self._metrics_digest is None or (
                presented is not None and hmac.compare_digest(digest(presented), self._metrics_digest)
            ):
                await self.app(scope, receive, send)
            else:
                await self._refuse(presented, send)
            return
        table: KeyTable = self.keys.table
        key = table.lookup(presented) if presented is not None else None
        if table.required and key is None:
            await self._refuse(presented, send)
            return
        caller = Caller(key)
        scope.setdefault("state", {})["caller"] = caller
        record = request_record(scope)
        if record is not None and key is not None:
            record.key = key.name

        async def send_with_limits(message: Message) -> None:
            if message["type"] == "http.response.start" and key is not None and key.has_rate_limits:
                if not caller.response_headers:  # a response that admission did not see
                    caller.response_headers.update(await scope["app"].state.admission.current_headers(key))
                extra = [(k.encode(), v.encode()) for k, v in caller.response_headers.items()]
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_limits)

    async def _refuse(self, presented: str | None, send: Send) -> None:
        self.metrics.rejections.labels("auth", NO_KEY).inc()
        await send_error(send, _unauthorized(presented))
