"""Liveness and readiness probes. Readiness is cached briefly so probes cannot overload Triton."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Depends, Request

from gateway.errors import JSONBytesResponse
from gateway.routers.deps import triton
from gateway.routing.fleet import Fleet
from gateway.routing.readiness import Verdict, verdict

router = APIRouter(tags=["health"])


class ReadinessCache:
    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._value: Verdict | None = None
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    async def get(self, fleet: Fleet, required: list[str]) -> Verdict:
        async with self._lock:  # concurrent probes share one upstream check
            if self._value is None or time.monotonic() - self._at > self.ttl_s:
                self._value = verdict(await fleet.states(), required)
                self._at = time.monotonic()
            return self._value


@router.get("/health/live")
async def live() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/ready")
async def ready(request: Request, fleet: Fleet = Depends(triton)) -> JSONBytesResponse:
    """200 while each required model (all known ones, without GATEWAY_REQUIRED_MODELS) has a replica that can
    serve it; the body gives each model's and each replica's state."""
    state = request.app.state
    if state.drain.draining:  # first, so that load balancers stop sending requests at once
        return JSONBytesResponse({"status": "draining", "reason": "the gateway is shutting down"}, status_code=503)
    readiness = await state.readiness.get(fleet, state.settings.required_model_names)
    return JSONBytesResponse(readiness.body, status_code=200 if readiness.ready else 503)
