"""The HTTP/1.1 protocol the gateway is served with: uvicorn's httptools protocol, with a bound on a request's head.

Neither httptools (llhttp) nor uvicorn's protocol on top of it limits the request line and headers (only uvicorn's
h11 protocol does, and it costs more CPU per event): megabytes of headers were accepted, and a header that never ends
kept growing the worker's memory. Past `GATEWAY_MAX_HEADER_BYTES` the client now gets a 431 in OpenAI's error shape
and the connection is closed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import OpenAIError
from gateway.settings import get_settings


# After a 431, how long the rest of what the client sends is read and dropped: closing with unread data makes the
# kernel reset the connection, and a client still sending its headers would see the reset instead of the answer.
LINGER_S = 2.0


class HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a request whose head is past the limit."""


def head_too_large_response(max_header_bytes: int) -> bytes:
    """The whole 431 response, written straight to the socket: no request exists yet to answer through the app."""
    error = OpenAIError(431, f"The request line and headers are larger than {max_header_bytes} bytes.")
    body = orjson.dumps(error.body())
    head = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n"
        b"connection: close\r\n\r\n"
    )
    return head + body


class BoundedHeadProtocol(HttpToolsProtocol):
    """Counts a request's head two ways: exactly, from the parsed URL and headers (a head that arrives whole in one
    read), and by the bytes received while it is incomplete (a head that never ends, which the parser buffers
    without calling back). Either past the limit refuses the request."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_header_bytes = get_settings().max_header_bytes
        self._head_parsed = 0
        self._head_received: int | None = 0  # None while a body is read: only a head is counted
        self._refused = False

    def _count(self, size: int) -> None:
        self._head_parsed += size
        if self._head_parsed > self.max_header_bytes:
            self._refused = True
            raise HeadTooLarge  # httptools stops and raises a parser error: uvicorn answers with send_400_response

    def data_received(self, data: bytes) -> None:
        if self._refused:  # answered already: the rest is dropped until the client or the linger closes
            return
        if self._head_received is not None:
            self._head_received += len(data)
        super().data_received(data)
        incomplete = self._head_received is not None
        if incomplete and self._head_received > self.max_header_bytes and not self._refused:
            self._refused = True
            self.send_400_response("")

    def send_400_response(self, msg: str) -> None:
        if not self._refused:
            super().send_400_response(msg)
            return
        self.transport.write(head_too_large_response(self.max_header_bytes))
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the answer is complete; reading goes on for a moment (LINGER_S)
            asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_parsed = 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_received = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_received = 0
