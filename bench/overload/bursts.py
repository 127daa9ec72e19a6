"""The overload's load: bursts of concurrent requests, half streamed, half not, each waiting for the burst
before it to end; and a liveness probe polling all the while."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp

from bench.overload.figures import Attempt
from bench.soak.driver import request_body
from bench.soak.outcomes import Exchange

_DATA = b"data: "
_DONE = b"[DONE]"


@dataclass(frozen=True)
class BurstPlan:
    base_url: str
    model: str
    bursts: int = 5
    size: int = 64  # requests per burst: four times a capacity of 8 in flight and 8 queued
    max_tokens: int = 32
    client_timeout_s: float = 60.0  # past it a request counts as hung
    pause_s: float = 0.5  # between bursts
    settle_s: float = 0.5  # after a burst starts, when the lone client begins: the burst's arrival is over


async def _read_stream(response: aiohttp.ClientResponse, exchange: Exchange) -> None:
    buffer = b""
    async for data in response.content.iter_any():
        buffer += data
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            event = event.strip()
            if not event.startswith(_DATA):
                continue
            payload = event[len(_DATA) :]
            if payload == _DONE:
                exchange.done = True
                return
            exchange.events.append(payload)


async def one_attempt(session: aiohttp.ClientSession, plan: BurstPlan, stream: bool, burst: int) -> Attempt:
    """One completion request, recorded whatever happens to it; its latency ends with its status when refused."""
    exchange = Exchange("completions", stream, plan.max_tokens)
    attempt = Attempt(exchange, burst=burst)
    body = request_body("completions", stream, plan.model, plan.max_tokens, "Once upon a time")
    started = time.monotonic()
    try:
        async with asyncio.timeout(plan.client_timeout_s):
            async with session.post(f"{plan.base_url}/v1/completions", json=body) as response:
                exchange.status = response.status
                attempt.retry_after = response.headers.get("Retry-After")
                if response.status != 200 or not stream:
                    exchange.body = await response.read()
                else:
                    await _read_stream(response, exchange)
    except TimeoutError:
        exchange.timed_out = True
    except (aiohttp.ClientError, ConnectionError) as exc:
        exchange.transport_error = type(exc).__name__
    exchange.latency_s = time.monotonic() - started
    return attempt


async def probe_liveness(
    base_url: str, stop: asyncio.Event, saturated: asyncio.Event, every_s: float = 0.05
) -> list[float | None]:
    """/health/live's latency every `every_s` while `saturated`, until `stop`, on a connection of its own; None
    for a probe that failed."""
    latencies: list[float | None] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        while not stop.is_set():
            await saturated.wait()
            started = time.monotonic()
            try:
                async with session.get(f"{base_url}/health/live") as response:
                    await response.read()
                    latencies.append(time.monotonic() - started if response.status == 200 else None)
            except (aiohttp.ClientError, TimeoutError):
                latencies.append(None)
            await asyncio.sleep(every_s)
    return latencies


async def probe_generation(
    plan: BurstPlan, stop: asyncio.Event, saturated: asyncio.Event, every_s: float = 0.05
) -> list[Attempt]:
    """A lone client's unstreamed completions, one at a time on a connection of its own, while `saturated`
    (once a burst's own arrival is over): what one more client sees of a gateway already full."""
    attempts: list[Attempt] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
        while not stop.is_set():
            await saturated.wait()
            if stop.is_set():
                break
            attempt = await one_attempt(session, plan, False, -1)
            attempt.lone = True
            attempts.append(attempt)
            await asyncio.sleep(every_s)
    return attempts


async def _saturate(saturated: asyncio.Event, after_s: float) -> None:
    await asyncio.sleep(after_s)
    saturated.set()


async def run_bursts(plan: BurstPlan) -> tuple[list[Attempt], list[float | None]]:
    """Every burst's attempts and the lone client's, and the liveness probes taken while the bursts ran."""
    attempts: list[Attempt] = []
    stop, saturated, settled = asyncio.Event(), asyncio.Event(), asyncio.Event()
    prober = asyncio.create_task(probe_liveness(plan.base_url, stop, saturated))
    lone = asyncio.create_task(probe_generation(plan, stop, settled))
    # A connection per request: a burst opens them all at once, as separate clients would.
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        for burst in range(plan.bursts):
            saturated.set()
            settling = asyncio.create_task(_saturate(settled, plan.settle_s))
            attempts += await asyncio.gather(
                *(one_attempt(session, plan, index % 2 == 0, burst) for index in range(plan.size))
            )
            settling.cancel()
            saturated.clear()
            settled.clear()
            await asyncio.sleep(plan.pause_s)
    stop.set()
    saturated.set()  # lets the probers see `stop`
    settled.set()
    return attempts + await lone, await prober
