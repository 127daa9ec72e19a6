"""The soak's load: concurrent aiohttp clients mixing streaming and non-streaming chat and completions, some
of which leave streams early; each request is recorded as an `Exchange` for `outcomes.classify`."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.soak.outcomes import Exchange

_DATA = b"data: "
_DONE = b"[DONE]"
_ERROR_EVENT = b'{"error"'  # how the gateway's error events begin (OpenAIError.body)
_PROMPTS = ["Tell me a story about", "The weather today is", "List three colours:", "Once upon a time"]


@dataclass(frozen=True)
class LoadPlan:
    base_url: str  # the gateway, e.g. http://127.0.0.1:9000
    model: str
    clients: int = 128
    max_tokens: int = 128  # see run.SOAK_MAX_TOKENS
    disconnect_share: float = 0.1  # this share of the clients leaves each of its streams early
    client_timeout_s: float = 70.0  # a little above the gateway's GATEWAY_REQUEST_TIMEOUT_S
    seed: int = 23


def request_body(endpoint: str, stream: bool, model: str, max_tokens: int, prompt: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "ignore_eos": True, "stream": stream}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def leaves_here(payload: bytes, events_seen: int, leave_after: int | None) -> bool:
    """Whether a leaving client closes its stream after this event: once it has seen `leave_after` events, but
    never on an error event, which it follows to its [DONE] so that the error is counted as one."""
    return leave_after is not None and events_seen >= leave_after and not payload.startswith(_ERROR_EVENT)


async def _read_events(response: aiohttp.ClientResponse, exchange: Exchange, leave_after: int | None) -> None:
    """Reads SSE events into `exchange` until [DONE]; with `leave_after`, stops after that many events."""
    buffer = b""
    async for data in response.content.iter_any():
        buffer += data
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            event = event.strip()
            if not event.startswith(_DATA):
                continue  # a comment (keep-alive ping)
            payload = event[len(_DATA) :]
            if payload == _DONE:
                exchange.done = True
                return
            exchange.events.append(payload)
            if leaves_here(payload, len(exchange.events), leave_after):
                exchange.client_disconnected = True
                return


async def one_request(
    session: aiohttp.ClientSession, plan: LoadPlan, endpoint: str, stream: bool, leave_after: int | None, prompt: str
) -> Exchange:
    """One request, recorded whatever happens to it."""
    exchange = Exchange(endpoint, stream, plan.max_tokens)
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    body = request_body(endpoint, stream, plan.model, plan.max_tokens, prompt)
    started = time.monotonic()
    try:
        async with asyncio.timeout(plan.client_timeout_s):
            async with session.post(plan.base_url + path, json=body) as response:
                exchange.status = response.status
                if response.status != 200 or not stream:
                    exchange.body = await response.read()
                else:
                    await _read_events(response, exchange, leave_after)
                if exchange.client_disconnected:
                    response.close()  # drops the connection: the gateway sees the client leave
    except TimeoutError:
        exchange.timed_out = True
    except (aiohttp.ClientError, ConnectionError) as exc:
        exchange.transport_error = type(exc).__name__
    exchange.latency_s = time.monotonic() - started
    return exchange


async def client(
    index: int, session: aiohttp.ClientSession, plan: LoadPlan, stop: asyncio.Event, record: list[Exchange]
) -> None:
    """Sends requests one after another until `stop`; backs off a little after a refusal (a fault is on)."""
    rng = random.Random(plan.seed * 1000 + index)
    leaves = index < round(plan.clients * plan.disconnect_share)
    while not stop.is_set():
        endpoint = rng.choice(("chat", "completions"))
        stream = leaves or rng.random() < 0.5
        leave_after = rng.randint(1, 4) if leaves else None
        exchange = await one_request(session, plan, endpoint, stream, leave_after, rng.choice(_PROMPTS))
        record.append(exchange)
        if exchange.status is None or exchange.status >= 400:
            await asyncio.sleep(0.5 + rng.random())


async def run_load(plan: LoadPlan, stop: asyncio.Event) -> list[Exchange]:
    """Every client's requests, once `stop` is set and each client's last request has ended."""
    record: list[Exchange] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        await asyncio.gather(*(client(index, session, plan, stop, record) for index in range(plan.clients)))
    return record
