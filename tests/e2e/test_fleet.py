"""Two Triton replicas behind one gateway, on the fast model: both serve, a shared prefix goes home, and a
replica killed under load fails no request that had not started streaming, then takes traffic again once back.

Replica A is the session's fast stack; replica B is a second Triton with its own engine, started here."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import httpx
import pytest

from localstack.net import free_port
from localstack.processes import Service, wait_until
from localstack.stack import LocalStack
from tests.engine_counts import EngineCounts, PausedEngine, engine_paused
from tests.metrics_text import sample_value


@dataclass
class Fleet:
    url: str
    a: LocalStack
    b: LocalStack
    service: Service

    @property
    def model(self) -> str:
        return self.a.config.model_name

    def grpc(self, stack: LocalStack) -> str:
        return f"127.0.0.1:{stack.config.grpc_port}"

    def requests_on(self, stack: LocalStack) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sample_value(text, "gateway_replica_requests_total", replica=self.grpc(stack), model=self.model) or 0.0

    def picks(self, reason: str) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum(sample_value(text, "gateway_replica_picks_total", replica=self.grpc(s), reason=reason) or 0.0
                   for s in (self.a, self.b))  # fmt: skip


@pytest.fixture(scope="module")
def fleet(fast_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    ports = {name: free_port() for name in ("http_port", "grpc_port", "metrics_port", "gateway_port")}
    b = LocalStack(replace(fast_stack.config, run_dir=tmp_path_factory.mktemp("replica_b"), **ports))
    b.config.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        b.start_triton()
        b.wait_triton_ready()
        env = {
            "GATEWAY_TRITON_GRPC_URLS": f"127.0.0.1:{fast_stack.config.grpc_port},127.0.0.1:{b.config.grpc_port}",
            "GATEWAY_TRITON_METRICS_URLS": json.dumps([fast_stack.triton_metrics_url, b.triton_metrics_url]),
            "GATEWAY_REQUIRED_MODELS": fast_stack.config.model_name,
            "GATEWAY_ROUTING": "prefix",
            "GATEWAY_READY_CACHE_S": "0",
        }
        with fast_stack.extra_gateway("gateway-fleet", env) as (service, url):
            yield Fleet(url, fast_stack, b, service)
    finally:
        b.stop()


def _body(model: str, prompt: str, max_tokens: int = 8, stream: bool = False) -> dict:
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": stream}


async def _complete_all(url: str, bodies: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=120) as client:
        return list(await asyncio.gather(*(client.post(f"{url}/v1/completions", json=b) for b in bodies)))


def test_both_replicas_serve_and_readiness_lists_them(fleet: Fleet) -> None:
    before = (fleet.requests_on(fleet.a), fleet.requests_on(fleet.b))
    replies = asyncio.run(_complete_all(fleet.url, [_body(fleet.model, f"Hi {i}") for i in range(24)]))
    assert [r.status_code for r in replies] == [200] * 24
    assert fleet.requests_on(fleet.a) > before[0] and fleet.requests_on(fleet.b) > before[1]
    ready = httpx.get(f"{fleet.url}/health/ready", timeout=10)
    assert ready.status_code == 200, ready.text
    replicas = ready.json()["replicas"]
    assert sorted(r["url"] for r in replicas) == sorted([fleet.grpc(fleet.a), fleet.grpc(fleet.b)])
    assert all(r["state"] == "ready" and r["models"][fleet.model] == "READY" for r in replicas)


def test_a_shared_prefix_goes_to_one_home_replica(fleet: Fleet) -> None:
    system = "You are a careful assistant who answers in one short sentence. " * 12  # 3 blocks of 256 characters
    before = (fleet.requests_on(fleet.a), fleet.requests_on(fleet.b), fleet.picks("prefix_home"))
    for i in range(8):  # one after another: never loaded enough to spill
        reply = httpx.post(f"{fleet.url}/v1/completions", json=_body(fleet.model, f"{system}Question {i}?"), timeout=60)
        assert reply.status_code == 200
    grew = sorted([fleet.requests_on(fleet.a) - before[0], fleet.requests_on(fleet.b) - before[1]])
    assert grew == [0, 8]
    # The first found no replica that had served its prefix and went where the load was lowest; the rest went home.
    assert fleet.picks("prefix_home") - before[2] == 7


async def _stream(
    client: httpx.AsyncClient, url: str, body: dict, first: asyncio.Event | None = None
) -> tuple[int, list[str]]:
    """The status and the stream's events (or the error body); `first` is set at the first event."""
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            return response.status_code, [(await response.aread()).decode()]
        events = []
        async for line in response.aiter_lines():
            if line:
                events.append(line)
                if first is not None:
                    first.set()
        return 200, events


async def _step_until_started(engines: PausedEngine, firsts: list[asyncio.Event]) -> None:
    """Runs the paused engines in short steps until every stream has its first event (PausedEngine.run_until: a
    step makes a few dozen tokens, so the first streams are far from their end when the last one starts)."""
    await asyncio.to_thread(engines.run_until, lambda: all(first.is_set() for first in firsts))


def _engines_idle(fleet: Fleet) -> bool:
    counts = [EngineCounts.read(s.triton_metrics_url, fleet.model) for s in (fleet.a, fleet.b)]
    return all(c.running == 0 and c.waiting == 0 for c in counts)


def test_a_replica_killed_under_load_fails_no_request_that_had_not_started(fleet: Fleet) -> None:
    # Requests left by earlier tests would hold the new streams back while the engines run in short steps.
    assert wait_until(lambda: _engines_idle(fleet), 120, 0.5), "the engines did not go idle"
    on_b = fleet.requests_on(fleet.b)

    async def scenario() -> tuple[list[tuple[int, list[str]]], list[tuple[int, list[str]]]]:
        async with httpx.AsyncClient(timeout=120) as client:
            body = _body(fleet.model, "Go on:", max_tokens=2000, stream=True)
            firsts = [asyncio.Event() for _ in range(8)]
            # Both engines run only in short steps until every stream has its first event: the streams on B are
            # then open mid-way when B dies (the fast engine would finish them in about a second otherwise).
            with engine_paused(fleet.a, fleet.b) as engines:
                running = [asyncio.create_task(_stream(client, fleet.url, body, first)) for first in firsts]
                await _step_until_started(engines, firsts)
                assert fleet.requests_on(fleet.b) > on_b, "no stream went to replica B"
                fleet.b.kill_triton()
            after = [asyncio.create_task(_stream(client, fleet.url, _body(fleet.model, f"Hi {i}", 16, True)))
                     for i in range(16)]  # fmt: skip
            return list(await asyncio.gather(*running)), list(await asyncio.gather(*after))

    running, after = asyncio.run(scenario())
    for status, events in after:  # none had started: each went to the live replica, or was retried there
        assert status == 200 and events[-1] == "data: [DONE]", events[-2:]
        last = json.loads(events[-2].removeprefix("data: "))  # parsed: the random text itself was once "error"
        assert "error" not in last and last["choices"][0]["finish_reason"] == "length", events[-2:]
    # Each stream ends complete or with an explicit error event, never silently short. Those on B were mid-way
    # when it died (the engines ran only until each stream had its first token out), so they end with the error.
    # (Stepped until every first event, the engines used to finish B's streams first in about half of the runs.)
    cut = 0
    for status, events in running:
        assert status == 200 and events[-1] == "data: [DONE]", events[-2:]
        last = json.loads(events[-2].removeprefix("data: "))  # parsed: random text may hold the word "error"
        if "error" in last:
            assert last["error"]["type"] == "service_unavailable"
            cut += 1
        else:
            assert last["choices"][0]["finish_reason"] == "length"
    assert cut, "no stream was open on replica B when it died"
    ready = httpx.get(f"{fleet.url}/health/ready", timeout=10)
    assert ready.status_code == 200  # the required model is still served by replica A
    states = {r["url"]: r["state"] for r in ready.json()["replicas"]}
    assert states[fleet.grpc(fleet.b)] == "unreachable"


def test_a_replica_back_gets_traffic_within_10_s(fleet: Fleet) -> None:
    if fleet.b.triton is not None and fleet.b.triton.running():
        fleet.b.kill_triton()
    fleet.b.start_triton()
    fleet.b.wait_triton_ready()
    back = time.monotonic()
    before = fleet.requests_on(fleet.b)

    def b_takes_traffic() -> bool:
        replies = asyncio.run(_complete_all(fleet.url, [_body(fleet.model, f"Hello {i}") for i in range(6)]))
        assert all(r.status_code == 200 for r in replies)
        return fleet.requests_on(fleet.b) > before

    assert wait_until(b_takes_traffic, 10, 0.2), "the replica got no traffic within 10 s of being ready"
    assert time.monotonic() - back < 15


def _replica_state(fleet: Fleet, stack: LocalStack) -> str:
    replicas = httpx.get(f"{fleet.url}/health/ready", timeout=10).json()["replicas"]
    return next(r["state"] for r in replicas if r["url"] == fleet.grpc(stack))


def test_a_draining_replica_finishes_its_streams_and_gets_no_new_requests(fleet: Fleet) -> None:
    """SIGTERM makes Triton drain: it says it is not ready and waits for its requests. The gateway sends it nothing
    new once it sees that, what it sent before then completes elsewhere, and the streams it had finish complete;
    then it exits cleanly. (Last in the module: B stops for good.)"""
    assert fleet.b.triton is not None and fleet.b.triton.running()
    on_b = fleet.requests_on(fleet.b)

    async def scenario() -> tuple[list[tuple[int, list[str]]], list[tuple[int, list[str]]], float]:
        async with httpx.AsyncClient(timeout=120) as client:
            body = _body(fleet.model, "Go on:", max_tokens=1000, stream=True)
            firsts = [asyncio.Event() for _ in range(8)]

            def short(prompt: str) -> asyncio.Task[tuple[int, list[str]]]:
                return asyncio.create_task(_stream(client, fleet.url, _body(fleet.model, prompt, 16, True)))

            with engine_paused(fleet.a, fleet.b) as engines:  # B's streams are mid-way when it starts draining
                running = [asyncio.create_task(_stream(client, fleet.url, body, first)) for first in firsts]
                await _step_until_started(engines, firsts)
                assert fleet.requests_on(fleet.b) > on_b, "no stream went to replica B"
                fleet.b.triton.process.terminate()
                # Before the gateway can know of the drain: those sent to B are refused there and retried on A.
                meanwhile = [short(f"Meanwhile {i}") for i in range(8)]
                seen = await asyncio.to_thread(wait_until, lambda: _replica_state(fleet, fleet.b) != "ready", 3, 0.1)
                assert seen, "the gateway did not see replica B draining"
            drained_from = fleet.requests_on(fleet.b)
            after = [short(f"Hi {i}") for i in range(16)]
            ended = await asyncio.gather(*running, *meanwhile)
            return list(ended), list(await asyncio.gather(*after)), drained_from

    running, after, drained_from = asyncio.run(scenario())
    for status, events in [*running, *after]:
        assert status == 200 and events[-1] == "data: [DONE]", events[-2:]
        assert json.loads(events[-2].removeprefix("data: "))["choices"][0]["finish_reason"] == "length", events[-2]
    assert fleet.requests_on(fleet.b) == drained_from, "a new request went to the draining replica"
    triton = fleet.b.triton
    triton.process.wait(timeout=60)  # its drain ends, the engine stops, the stub exits: cleanly
    log = triton.log_path.read_text(errors="replace")
    assert "successfully unloaded" in log and "Segfault" not in log, triton.log_tail()
