"""A TCP proxy for end-to-end tests that stands between the gateway and Triton and can stall or refuse.

It runs its own asyncio loop in a thread, so that synchronous tests can drive it. `pause()` holds every byte in
both directions (an upstream that stops answering, with the connection still up); `refuse()` drops every
connection and closes new ones at once (an upstream that is gone); `forward()` goes back to normal.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

Mode = Literal["forward", "paused", "refusing"]


class StallingProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="stalling-proxy", daemon=True)
        self._flowing: asyncio.Event | None = None
        self._mode: Mode = "forward"
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    def start(self) -> StallingProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def pause(self) -> None:
        self._call(self._set_mode("paused"))

    def forward(self) -> None:
        self._call(self._set_mode("forward"))

    def refuse(self) -> None:
        self._call(self._set_mode("refusing"))

    def _call(self, coroutine: object) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)  # type: ignore[arg-type]

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        self._drop_all()
        await self._server.wait_closed()

    async def _set_mode(self, mode: Mode) -> None:
        assert self._flowing is not None
        self._mode = mode
        if mode == "paused":
            self._flowing.clear()
            return
        self._flowing.set()
        if mode == "refusing":
            self._drop_all()

    def _drop_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self._mode == "refusing":
            client_writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers.update((client_writer, upstream_writer))
        await asyncio.gather(
            self._pipe(client_reader, upstream_writer, client_writer),
            self._pipe(upstream_reader, client_writer, upstream_writer),
        )

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, other: asyncio.StreamWriter
    ) -> None:
        assert self._flowing is not None
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()  # paused: what was read waits here, and nothing more is read
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            for end in (writer, other):
                self._writers.discard(end)
                end.transport.abort()
