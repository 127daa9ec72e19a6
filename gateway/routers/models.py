"""`/v1/models`: the models Triton serves and that are ready."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from gateway.errors import model_not_found
from gateway.routers.deps import served_models

router = APIRouter(tags=["models"])
_STARTED = int(time.time())


def _model(name: str) -> dict:
    return {"id": name, "object": "model", "created": _STARTED, "owned_by": "triton"}


@router.get("/v1/models")
async def list_models(request: Request) -> dict:
    return {"object": "list", "data": [_model(name) for name in await served_models(request)]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict:
    if model_id not in await served_models(request):
        raise model_not_found(model_id)
    return _model(model_id)
