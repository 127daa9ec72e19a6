"""The drain without servers: its wait, the HTTP edge that counts and refuses, and the signal it holds back."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
import pytest
from prometheus_client import CollectorRegistry
from starlette.types import Receive, Scope, Send

from gateway.drain import Drain, DrainMiddleware, SignalDrain
from gateway.drain import signals as drain_signals
from gateway.drain.metrics import DrainMetrics


async def test_wait_ends_when_the_last_generation_leaves() -> None:
    drain = Drain(timeout_s=5)
    drain.enter()
    drain.enter()
    asyncio.get_running_loop().call_later(0.05, drain.leave)
    asyncio.get_running_loop().call_later(0.1, drain.leave)
    assert await drain.wait(5) is True
    assert drain.in_flight == 0


async def test_wait_gives_up_at_its_timeout_or_on_a_hurry() -> None:
    drain = Drain(timeout_s=5)
    drain.enter()
    assert await drain.wait(0.05) is False
    asyncio.get_running_loop().call_later(0.05, drain.hurry)
    assert await asyncio.wait_for(drain.wait(5), 2) is False
    # After the cut, the wait for the cut streams is not ended by the hurry, only by their end.
    asyncio.get_running_loop().call_later(0.05, drain.leave)
    assert await drain.wait(5, hurry_ends_it=False) is True


def test_begin_is_true_once() -> None:
    drain = Drain(timeout_s=1)
    assert drain.begin() is True and drain.draining
    assert drain.begin() is False


def _edge(drain: Drain, seen: list[tuple[str, int]], refused: list[int]) -> httpx.AsyncClient:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope["path"], drain.in_flight))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    edge = DrainMiddleware(app, drain=drain, on_refused=lambda: refused.append(1))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=edge), base_url="http://t")


async def test_generations_are_counted_until_their_response_ends() -> None:
    drain, seen, refused = Drain(timeout_s=1), [], []
    async with _edge(drain, seen, refused) as client:
        assert (await client.post("/v1/chat/completions", json={})).status_code == 200
        assert (await client.get("/v1/models")).status_code == 200
        assert (await client.post("/tokenize", json={})).status_code == 200
    assert seen == [("/v1/chat/completions", 1), ("/v1/models", 0), ("/tokenize", 1)]
    assert drain.in_flight == 0 and not refused


async def test_a_draining_gateway_refuses_generations_and_asks_clients_to_reconnect() -> None:
    drain, seen, refused = Drain(timeout_s=1), [], []
    drain.begin()
    async with _edge(drain, seen, refused) as client:
        reply = await client.post("/v1/completions", json={"model": "m", "prompt": "hi"})
        probe = await client.get("/health/live")
    assert reply.status_code == 503 and reply.headers["connection"] == "close"
    assert reply.json()["error"]["type"] == "service_unavailable"
    assert reply.json()["error"]["code"] == "server_shutting_down"
    assert refused == [1]
    # Everything else is still served, with the connection closed after it.
    assert probe.status_code == 200 and probe.headers["connection"] == "close"
    assert seen == [("/health/live", 0)]


@pytest.fixture
def server_handler():
    """Stands in for uvicorn's SIGTERM and SIGINT handler; the real ones come back afterwards."""
    received: list[int] = []
    originals = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in drain_signals.STOP_SIGNALS}
    try:
        yield received
    finally:
        for s, handler in originals.items():
            signal.signal(s, handler)


async def _until(check, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_the_signal_reaches_the_server_once_generations_have_ended(server_handler: list[int]) -> None:
    drain = Drain(timeout_s=30)
    metrics = DrainMetrics(CollectorRegistry())
    cuts: list[int] = []
    watcher = SignalDrain(drain, cut=lambda: cuts.append(1) or 1, metrics=metrics)
    assert watcher.install()
    drain.enter()
    os.kill(os.getpid(), signal.SIGTERM)
    await _until(lambda: drain.draining)
    os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM changes nothing
    await asyncio.sleep(0.1)
    assert server_handler == [] and metrics.draining._value.get() == 1
    drain.leave()
    await _until(lambda: server_handler == [signal.SIGTERM])
    assert cuts == []
    # The server's handler is back in place for what comes next.
    assert "SignalDrain" not in signal.getsignal(signal.SIGTERM).__qualname__
    await watcher.close()


async def test_generations_still_running_at_the_deadline_are_cut(
    server_handler: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drain_signals, "CUT_GRACE_S", 0.1)
    drain = Drain(timeout_s=0.2)
    metrics = DrainMetrics(CollectorRegistry())
    watcher = SignalDrain(drain, cut=lambda: 3, metrics=metrics)
    assert watcher.install()
    drain.enter()
    os.kill(os.getpid(), signal.SIGTERM)
    await _until(lambda: server_handler == [signal.SIGTERM])
    assert metrics.cut._value.get() == 3
    await watcher.close()


async def test_a_second_ctrl_c_cuts_at_once(server_handler: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(drain_signals, "CUT_GRACE_S", 0.1)
    drain = Drain(timeout_s=30)
    cuts: list[int] = []
    watcher = SignalDrain(drain, cut=lambda: cuts.append(1) or 1, metrics=DrainMetrics(CollectorRegistry()))
    assert watcher.install()
    drain.enter()
    os.kill(os.getpid(), signal.SIGINT)
    await _until(lambda: drain.draining)
    os.kill(os.getpid(), signal.SIGINT)
    await _until(lambda: server_handler == [signal.SIGINT])
    assert cuts == [1]
    await watcher.close()


async def test_nothing_is_taken_over_outside_the_main_thread() -> None:
    watcher = SignalDrain(Drain(timeout_s=1), cut=lambda: 0, metrics=DrainMetrics(CollectorRegistry()))
    assert await asyncio.to_thread(watcher.install) is False
