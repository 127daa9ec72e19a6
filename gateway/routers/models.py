"""`/v1/models`: the models Triton serves and that are ready, with their context lengths."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from gateway.errors import model_not_found
from gateway.routers.deps import served_models

router = APIRouter(tags=["models"])
_STARTED = int(time.time())


def _model(name: str, max_model_len: int | None) -> dict:
    """OpenAI's model object, plus vLLM's `max_model_len` (the context length its model card reports)."""
    return {"id": name, "object": "model", "created": _STARTED, "owned_by": "triton", "max_model_len": max_model_len}


@router.get("/v1/models")
async def list_models(request: Request) -> dict:
    return {"object": "list", "data": [_model(name, length) for name, length in (await served_models(request)).items()]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict:
    served = await served_models(request)
    if model_id not in served:
        raise model_not_found(model_id)
    return _model(model_id, served[model_id])
