"""The concurrency-limited request driver shared by the load generators, so A, B and the floor are
driven by the same loop and only the protocol differs."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestRecord:
    """What one request saw, in seconds measured with `time.perf_counter`."""

    start: float
    ok: bool = False
    ttft: float | None = None
    latency: float = 0.0
    itls: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0  # from the usage, when the server reports it
    chunks: int = 0
    payload_bytes: int = 0
    error: str | None = None


class StreamTimer:
    """Turns chunk arrival times into TTFT and inter-chunk latencies, as vLLM's benchmark does."""

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.last = record.start

    def chunk(self, count: int = 1) -> None:
        """`count` chunks arrived together: the first gets the gap, the rest a gap of zero."""
        if count <= 0:
            return
        now = time.perf_counter()
        if self.record.ttft is None:
            self.record.ttft = now - self.record.start
            self.record.itls.extend([0.0] * (count - 1))
        else:
            self.record.itls.append(now - self.last)
            self.record.itls.extend([0.0] * (count - 1))
        self.record.chunks += count
        self.last = now

    def finish(self) -> None:
        self.record.latency = (self.last if self.record.chunks else time.perf_counter()) - self.record.start


RequestFunc = Callable[[int, RequestRecord], Awaitable[None]]


@dataclass
class RunResult:
    records: list[RequestRecord]
    wall_s: float
    peak_in_flight: int


class _Gauge:
    """Requests in flight, and the most seen at once."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    def up(self) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)

    def down(self) -> None:
        self.now -= 1


async def drive(
    send: RequestFunc,
    concurrency: int,
    requests: int | None = None,
    duration_s: float | None = None,
    warmups: int = 0,
    until: Callable[[], bool] | None = None,
) -> RunResult:
    """Runs `send(i, record)` from `concurrency` workers until `requests` were sent, `duration_s` passed or
    `until()` says so (whichever comes first of those given); `warmups` requests go first and are not recorded."""
    if requests is None and duration_s is None and until is None:
        raise ValueError("give a request count, a duration or a condition to stop")
    if warmups:
        await _workers(send, min(concurrency, warmups), warmups, lambda: False, [], _Gauge())
    records: list[RequestRecord] = []
    gauge = _Gauge()
    start = time.perf_counter()
    deadline = start + duration_s if duration_s is not None else math.inf

    def done() -> bool:
        return time.perf_counter() >= deadline or (until is not None and until())

    await _workers(send, concurrency, requests, done, records, gauge)
    return RunResult(records, time.perf_counter() - start, gauge.peak)


async def _timed(gauge: _Gauge, call: Callable[[RequestRecord], Awaitable[None]]) -> RequestRecord:
    """One request's record; a failed request is recorded, never raised: it must not stop the run (nor, in a
    conversation, the turns after it)."""
    record = RequestRecord(start=time.perf_counter())
    gauge.up()
    try:
        await call(record)
    except Exception as exc:
        record.ok = False
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        gauge.down()
    return record


async def _workers(
    send: RequestFunc,
    concurrency: int,
    requests: int | None,
    done: Callable[[], bool],
    records: list[RequestRecord],
    gauge: _Gauge,
) -> None:
    indices = iter(range(requests)) if requests is not None else itertools.count()

    async def worker() -> None:
        for i in indices:  # shared: each index is sent once
            if done():
                return
            records.append(await _timed(gauge, lambda record: send(i, record)))

    await asyncio.gather(*(worker() for _ in range(concurrency)))


SessionFunc = Callable[[Any, int, RequestRecord], Awaitable[None]]


async def drive_sessions(
    send: SessionFunc,
    concurrency: int,
    sessions: Iterable[Any],
    turns_of: Callable[[Any], int],
    until: Callable[[], bool] | None = None,
) -> RunResult:
    """Runs sessions (conversations) from `concurrency` workers: a worker takes the next session and sends its
    turns one after another, `send(session, turn, record)`, each once the one before has ended, as a user waits
    for the reply before writing again; then it takes the next session. Every turn is a record. Ends when the
    sessions run out or `until()` says so (checked before each turn)."""
    records: list[RequestRecord] = []
    gauge = _Gauge()
    queue = iter(sessions)  # shared: each session goes to one worker
    start = time.perf_counter()

    async def worker() -> None:
        for session in queue:
            for turn in range(turns_of(session)):
                if until is not None and until():
                    return
                records.append(await _timed(gauge, lambda record: send(session, turn, record)))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return RunResult(records, time.perf_counter() - start, gauge.peak)
