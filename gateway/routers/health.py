"""Liveness and readiness probes. Readiness is cached briefly so probes cannot overload Triton."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from fastapi import APIRouter, Depends, Request

from gateway.errors import JSONBytesResponse, OpenAIError
from gateway.model_map import ModelMap
from gateway.observability.federation import TritonMetricsFederation
from gateway.routers.deps import triton
from gateway.triton_client import TritonClient

router = APIRouter(tags=["health"])


@dataclass
class Readiness:
    ready: bool
    body: dict


class ReadinessCache:
    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._value: Readiness | None = None
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    async def get(self, client: TritonClient, models: ModelMap, federation: TritonMetricsFederation) -> Readiness:
        async with self._lock:  # concurrent probes share one upstream check
            if self._value is None or time.monotonic() - self._at > self.ttl_s:
                self._value = await check_readiness(client, models, federation)
                self._at = time.monotonic()
            return self._value


async def check_readiness(
    client: TritonClient, model_map: ModelMap, federation: TritonMetricsFederation
) -> Readiness:
    # Requests to a model whose circuit breaker is open fail fast until its cool-down ends: said first, and
    # without asking a Triton that keeps failing.
    broken = client.breakers.open_models()
    if broken:
        reason = f"circuit breaker open: {', '.join(broken)}"
        return Readiness(False, {"status": "unavailable", "reason": reason, "breakers_open": broken})
    try:
        entries = await model_map.refresh()
    except OpenAIError:
        return Readiness(False, {"status": "unavailable", "reason": "Triton is not reachable"})
    models = {m.name: m.state or "UNKNOWN" for m in entries}
    not_ready = sorted(name for name, state in models.items() if state != "READY")
    if not_ready:
        reason = f"model not ready: {', '.join(not_ready)}"
        return Readiness(False, {"status": "unavailable", "reason": reason, "models": models})
    if not models:
        return Readiness(False, {"status": "unavailable", "reason": "no model is loaded", "models": models})
    if not await client.server_ready():
        return Readiness(False, {"status": "unavailable", "reason": "Triton is not ready", "models": models})
    # Where the backend checks its engine's health, a failed engine makes its model not ready.
    unhealthy = sorted(await federation.unhealthy_engines() & models.keys())
    if unhealthy:
        models.update({name: "ENGINE_UNHEALTHY" for name in unhealthy})
        reason = f"engine unhealthy: {', '.join(unhealthy)}"
        return Readiness(False, {"status": "unavailable", "reason": reason, "models": models})
    return Readiness(True, {"status": "ok", "models": models})


@router.get("/health/live")
async def live() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/ready")
async def ready(request: Request, client: TritonClient = Depends(triton)) -> JSONBytesResponse:
    state = request.app.state
    if state.drain.draining:  # first, so that load balancers stop sending requests at once
        return JSONBytesResponse({"status": "draining", "reason": "the gateway is shutting down"}, status_code=503)
    readiness = await state.readiness.get(client, state.model_map, state.federation)
    return JSONBytesResponse(readiness.body, status_code=200 if readiness.ready else 503)
