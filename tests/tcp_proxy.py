"""A fault-injecting TCP proxy for end-to-end tests, standing between the gateway and Triton.

It runs its own asyncio loop in a thread, so that synchronous tests can drive it. The faults:
- `delay(up_s, down_s)`: latency added to every byte, per direction (up: towards Triton; down: back);
- `pause()`: every byte is held in both directions (an upstream that stops answering, with the connection up);
  `forward()` delivers what was held;
- `black_hole()`: bytes are read and dropped, and new connections are accepted but never connected upstream
  (a peer that vanished without a word). Leaving it resets the connections that lost bytes;
- `reset()`: every open connection is reset (RST, SO_LINGER 0);
- `refuse()`: open connections are reset and the port stops listening (connection refused) until `forward()`.
`pause`, `black_hole` and `reset` also take `after_bytes`: the fault then hits once that many more bytes have gone
down a connection (towards the client), on the connections open and those to come, until `forward()`. Armed
before a request, it cannot be outrun by a fast engine on a loaded machine, as a call made after reading the
stream's first event can. A reset after bytes lands `RESET_QUIET_S` after the last of them, with nothing more sent:
a RST that reaches the peer before it has read them makes the kernel drop them, and the stream would then look
reset before its first byte (the case that `reset()` on a paused connection tests). `forward()` ends every fault
and goes back to normal.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["forward", "paused", "black_hole", "refusing"]
Fault = Literal["paused", "black_hole", "reset"]
Direction = Literal["up", "down"]
RESET_QUIET_S = 0.5  # between the last bytes let through and an armed reset: time for the peer to read them


def _reset(writer: asyncio.StreamWriter) -> None:
    """Closes with a RST rather than a FIN: SO_LINGER on, with a zero timeout."""
    if writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


@dataclass(eq=False)
class _Connection:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    budget: int | None = None  # bytes still allowed down before the armed fault; None: none armed
    lost_bytes: bool = False  # a black hole dropped some of its bytes: it cannot carry on
    delivered_at: dict[str, float] = field(default_factory=lambda: {"up": 0.0, "down": 0.0})

    def writers(self) -> list[asyncio.StreamWriter]:
        return [w for w in (self.client, self.upstream) if w is not None]

    def reset(self) -> None:
        for writer in self.writers():
            _reset(writer)


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._flowing: asyncio.Event | None = None
        self._mode: Mode = "forward"
        self._delay: dict[str, float] = {"up": 0.0, "down": 0.0}
        self._armed: tuple[Fault, int] | None = None  # a fault, and the bytes down each connection before it
        self._connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None
        self.accepted = 0  # connections accepted so far (a test can see the gateway reconnect)
        self.held_up = 0  # bytes towards Triton held by the current pause (a test can see its request arrive)

    # The test's side: each call returns once the fault is in place.

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def forward(self) -> None:
        self._call(self._set_mode("forward", clear_delay=True))

    def pause(self, after_bytes: int | None = None) -> None:
        self._call(self._arm("paused", after_bytes))

    def black_hole(self, after_bytes: int | None = None) -> None:
        self._call(self._arm("black_hole", after_bytes))

    def refuse(self) -> None:
        self._call(self._set_mode("refusing"))

    def delay(self, up_s: float = 0.0, down_s: float = 0.0) -> None:
        self._call(self._set_delay(up_s, down_s))

    def reset(self, after_bytes: int | None = None) -> int:
        """Resets the open connections, now or after `after_bytes`; returns how many were open."""
        return self._call(self._arm("reset", after_bytes))  # type: ignore[return-value]

    def describe(self) -> str:
        """The connections open now, for a failing test's message."""
        return f"accepted {self.accepted}, mode {self._mode}, armed {self._armed}, open: " + ", ".join(
            f"{c.client.get_extra_info('peername')} budget {c.budget}" for c in list(self._connections)
        )

    def _call(self, coroutine: object) -> object:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)  # type: ignore[arg-type]

    # The loop's side.

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        await self._listen()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset_all()
        if self._server is not None:
            await self._server.wait_closed()

    async def _set_mode(self, mode: Mode, clear_delay: bool = False) -> None:
        assert self._flowing is not None
        previous, self._mode = self._mode, mode
        if clear_delay:
            self._delay = {"up": 0.0, "down": 0.0}
            self._armed = None
            for connection in self._connections:
                connection.budget = None
        if mode == "paused":
            self.held_up = 0
            self._flowing.clear()
            return
        self._flowing.set()
        if previous == "black_hole":  # their byte streams have holes: like a real black hole's, they end
            for connection in [c for c in self._connections if c.lost_bytes]:
                self._drop(connection)
        if mode == "refusing":
            self._reset_all()
            if self._server is not None:
                self._server.close()
                self._server = None
        elif self._server is None:
            await self._listen()

    async def _set_delay(self, up_s: float, down_s: float) -> None:
        self._delay = {"up": up_s, "down": down_s}

    async def _arm(self, fault: Fault, after_bytes: int | None) -> int:
        connections = list(self._connections)
        if after_bytes is not None and after_bytes > 0:
            self._armed = (fault, after_bytes)
            for connection in connections:
                connection.budget = after_bytes
        else:
            await self._strike(fault, connections)
        return len(connections)

    async def _strike(self, fault: Fault, connections: list[_Connection]) -> None:
        """The fault, now: a reset hits `connections`, a pause or a black hole every connection."""
        if fault == "reset":
            for connection in connections:
                self._drop(connection)
        else:
            await self._set_mode(fault)

    def _drop(self, connection: _Connection) -> None:
        connection.reset()
        self._connections.discard(connection)

    def _reset_all(self) -> None:
        for connection in list(self._connections):
            self._drop(connection)

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._mode == "refusing":  # accepted just before the port closed
            _reset(client_writer)
            return
        connection = _Connection(client_writer, budget=self._armed[1] if self._armed else None)
        self._connections.add(connection)
        if self._mode == "black_hole":  # never connected upstream: what the client sends goes nowhere
            connection.lost_bytes = True
            await self._swallow(client_reader, connection)
            return
        try:
            upstream_reader, connection.upstream = await asyncio.open_connection(*self.target)
        except OSError:
            self._drop(connection)
            return
        await asyncio.gather(
            self._pipe(client_reader, connection.upstream, connection, "up"),
            self._pipe(upstream_reader, client_writer, connection, "down"),
        )

    async def _swallow(self, reader: asyncio.StreamReader, connection: _Connection) -> None:
        try:
            while await reader.read(65536):
                pass
        except (ConnectionError, OSError):
            pass
        finally:
            self._drop(connection)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: _Connection, way: Direction
    ) -> None:
        assert self._flowing is not None
        try:
            while data := await reader.read(65536):
                if way == "up" and not self._flowing.is_set():
                    self.held_up += len(data)
                await self._flowing.wait()  # paused: what was read waits here, and nothing more is read
                if way == "down" and connection.budget is not None:
                    if len(data) < connection.budget:
                        connection.budget -= len(data)
                    else:  # the armed fault strikes within these bytes
                        head, data = data[: connection.budget], data[connection.budget :]
                        connection.budget = None
                        if head and self._mode != "black_hole":
                            await self._deliver(writer, head, connection, way)
                        fault = self._armed[0] if self._armed else "reset"
                        if fault == "reset":
                            await writer.drain()
                            await asyncio.sleep(RESET_QUIET_S)
                            self._drop(connection)
                            return
                        if self._mode == "forward":
                            await self._strike(fault, [connection])
                        await self._flowing.wait()
                        if not data:
                            continue
                if self._mode == "black_hole":
                    connection.lost_bytes = True
                    continue
                await self._deliver(writer, data, connection, way)
        except (ConnectionError, OSError):
            pass
        finally:
            self._drop(connection)

    async def _deliver(self, writer: asyncio.StreamWriter, data: bytes, connection: _Connection, way: Direction) -> None:
        """Writes `data` after the direction's delay, in order, without holding up the reads behind it."""
        delay = self._delay[way]
        if delay <= 0 and connection.delivered_at[way] <= self._loop.time():
            writer.write(data)
            await writer.drain()
            return
        at = max(self._loop.time() + delay, connection.delivered_at[way])
        connection.delivered_at[way] = at
        self._loop.call_at(at, self._write_if_open, writer, data)

    @staticmethod
    def _write_if_open(writer: asyncio.StreamWriter, data: bytes) -> None:
        if not writer.transport.is_closing():
            writer.write(data)
