"""`/v1/models`: the models Triton serves and that are ready."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends

from gateway.errors import model_not_found
from gateway.routers.deps import triton
from gateway.triton_client import TritonClient

router = APIRouter(tags=["models"])
_STARTED = int(time.time())


def _model(name: str) -> dict:
    return {"id": name, "object": "model", "created": _STARTED, "owned_by": "triton"}


@router.get("/v1/models")
async def list_models(client: TritonClient = Depends(triton)) -> dict:
    names = sorted(await client.ready_model_names(fresh=True))
    return {"object": "list", "data": [_model(name) for name in names]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, client: TritonClient = Depends(triton)) -> dict:
    if model_id not in await client.ready_model_names(fresh=True):
        raise model_not_found(model_id)
    return _model(model_id)
