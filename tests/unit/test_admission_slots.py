"""Admission's shells without a gateway: the global queue, per-key counters in memory and in a real Redis, and
shedding on the waiting count read from a metrics endpoint."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry

from gateway.admission import Admission, AdmissionMetrics, Caller
from gateway.admission.keys import ApiKey, digest
from gateway.admission.limiter import KeyLimiter
from gateway.admission.slots import EngineQueues, GlobalSlots
from gateway.errors import OpenAIError
from gateway.observability.federation import TritonMetricsFederation
from localstack.net import free_port


def _metrics() -> AdmissionMetrics:
    return AdmissionMetrics(CollectorRegistry())


async def test_global_slots_queue_in_order_and_refuse_past_the_queue() -> None:
    slots = GlobalSlots(1, 1, 5.0, _metrics())
    assert await slots.acquire() is None
    waiting = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    assert not waiting.done()
    assert await slots.acquire() == "queue_full"
    slots.release()  # handed to the waiter
    assert await waiting is None and slots.in_flight == 1
    slots.release()
    assert slots.in_flight == 0


async def test_a_wait_past_the_queue_timeout_is_refused_and_leaves_no_trace() -> None:
    metrics = _metrics()
    slots = GlobalSlots(1, 5, 0.05, metrics)
    assert await slots.acquire() is None
    assert await slots.acquire() == "queue_timeout"
    assert metrics.queued._value.get() == 0
    slots.release()
    assert slots.in_flight == 0 and await slots.acquire() is None


async def test_a_cancelled_waiter_gives_its_place_up() -> None:
    slots = GlobalSlots(1, 5, 5.0, _metrics())
    assert await slots.acquire() is None
    waiter = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    slots.release()
    assert slots.in_flight == 0


@pytest.fixture(params=["memory", "redis"])
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[KeyLimiter]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    limiter = KeyLimiter(url, lease_s=60)
    try:
        yield limiter
    finally:
        await limiter.close()


def _key(name: str, **limits: int) -> ApiKey:
    return ApiKey(name, digest(name), **limits)


async def test_requests_per_minute(limiter: KeyLimiter) -> None:
    key = _key("rpm", rpm=2)
    first, second, third = [await limiter.check_rates(key) for _ in range(3)]
    assert first.refused is None and first.requests.remaining == 1
    assert second.refused is None and second.requests.remaining == 0
    assert third.refused == "requests" and third.requests.limit == 2
    assert time.time() < third.requests.reset_at <= time.time() + 60


async def test_tokens_count_after_the_fact_and_past_the_limit(limiter: KeyLimiter) -> None:
    key = _key("tpm", tpm=25)
    assert (await limiter.check_rates(key)).tokens.remaining == 25
    await limiter.count_tokens(key, 20)
    assert (await limiter.check_rates(key)).tokens.remaining == 5
    await limiter.count_tokens(key, 20)  # 40 of 25: counted all the same
    refused = await limiter.check_rates(key)
    assert refused.refused == "tokens" and refused.tokens.remaining == 0


async def test_parallel_leases(limiter: KeyLimiter) -> None:
    assert await limiter.parallel.acquire("par", 2, "a")
    assert await limiter.parallel.acquire("par", 2, "b")
    assert not await limiter.parallel.acquire("par", 2, "c")
    await limiter.parallel.release("par", "a")
    assert await limiter.parallel.acquire("par", 2, "c")


async def test_a_slot_frees_its_parallel_lease_on_error_and_counts_tokens(limiter: KeyLimiter) -> None:
    metrics = _metrics()
    admission = Admission(limiter, GlobalSlots(None, 0, 1.0, metrics), metrics)
    caller = Caller(_key("slot", parallel=1, tpm=100))
    async with admission.slot(caller, "m") as slot:
        with pytest.raises(OpenAIError) as refused:
            async with admission.slot(Caller(caller.key), "m"):
                pass
        assert refused.value.status == 429 and refused.value.code == "rate_limit_exceeded"
        assert refused.value.headers["Retry-After"] == "1"
        slot.count(40)
    assert caller.response_headers["x-ratelimit-remaining-tokens"] == "100"
    with pytest.raises(RuntimeError):
        async with admission.slot(caller, "m"):
            raise RuntimeError("the generation failed")
    again = Caller(caller.key)
    async with admission.slot(again, "m"):
        assert again.response_headers["x-ratelimit-remaining-tokens"] == "60"
    assert metrics.rejections.labels("rate_limit", "slot")._value.get() == 1
    assert metrics.key_tokens.labels("slot")._value.get() == 40


async def test_a_handed_over_slot_stays_held_until_released(limiter: KeyLimiter) -> None:
    metrics = _metrics()
    admission = Admission(limiter, GlobalSlots(1, 0, 1.0, metrics), metrics)
    async with admission.slot(Caller(None), "m") as slot:
        close = slot.hand_over()
    with pytest.raises(OpenAIError) as busy:
        async with admission.slot(Caller(None), "m"):
            pass
    assert busy.value.status == 503 and busy.value.headers["Retry-After"] == "1"
    await close()
    await close()  # idempotent
    assert admission.global_slots.in_flight == 0
    assert metrics.rejections.labels("queue_full", "none")._value.get() == 1


async def test_an_unreachable_redis_refuses_keyed_generations_with_503() -> None:
    metrics = _metrics()
    limiter = KeyLimiter(f"redis://127.0.0.1:{free_port()}/0", lease_s=60)  # nothing listens there
    admission = Admission(limiter, GlobalSlots(None, 0, 1.0, metrics), metrics)
    try:
        with pytest.raises(OpenAIError) as refused:
            async with admission.slot(Caller(_key("k", rpm=5)), "m"):
                pass
        assert refused.value.status == 503 and refused.value.headers["Retry-After"] == "1"
        assert metrics.rejections.labels("unavailable", "k")._value.get() == 1
        async with admission.slot(Caller(None), "m"):  # without a key, Redis is not needed
            pass
    finally:
        await limiter.close()


WAITING = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model="busy",version="1"} 6
vllm:num_requests_waiting{model="calm",version="1"} 0
"""


@pytest.fixture
def metrics_server() -> Iterator[str]:
    """A Triton-like metrics endpoint on a free port (plain HTTP in a thread)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = WAITING.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_shedding_refuses_the_model_whose_engines_have_too_many_waiting(metrics_server: str) -> None:
    metrics = _metrics()
    federation = TritonMetricsFederation(lambda: [metrics_server], timeout_s=2)
    queues = EngineQueues(federation, refresh_s=0.05)
    stop = asyncio.Event()
    scraper = asyncio.ensure_future(queues.run(stop))
    limiter = KeyLimiter(None, lease_s=60)
    admission = Admission(limiter, GlobalSlots(None, 0, 1.0, metrics), metrics, queues, shed_waiting_above=5)
    try:
        for _ in range(100):
            if queues.waiting:
                break
            await asyncio.sleep(0.02)
        assert queues.waiting == {"busy": 6.0, "calm": 0.0}
        with pytest.raises(OpenAIError) as shed:
            async with admission.slot(Caller(None), "busy"):
                pass
        assert shed.value.status == 503 and shed.value.headers["Retry-After"] == "1"
        async with admission.slot(Caller(None), "calm"):
            pass
        assert metrics.rejections.labels("shed", "none")._value.get() == 1
    finally:
        stop.set()
        await scraper
        await federation.close()
