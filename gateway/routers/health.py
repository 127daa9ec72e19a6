"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import ORJSONResponse

from gateway.errors import OpenAIError
from gateway.routers.deps import triton
from gateway.triton_client import TritonClient

router = APIRouter(tags=["health"])


@router.get("/health/live")
async def live() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/ready")
async def ready(client: TritonClient = Depends(triton)) -> ORJSONResponse:
    if not await client.server_ready():
        return ORJSONResponse({"status": "unavailable", "reason": "Triton is not reachable or not ready"}, 503)
    try:
        entries = await client.models(fresh=True)
    except OpenAIError as exc:
        return ORJSONResponse({"status": "unavailable", "reason": exc.message}, 503)
    models = {m.name: m.state or "UNKNOWN" for m in entries}
    not_ready = {name: state for name, state in models.items() if state != "READY"}
    if not models or not_ready:
        reason = "no model is loaded" if not models else "some models are not ready"
        return ORJSONResponse({"status": "unavailable", "reason": reason, "models": models}, 503)
    return ORJSONResponse({"status": "ok", "models": models})
