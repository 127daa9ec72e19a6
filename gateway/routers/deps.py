"""Shared request dependencies."""

from __future__ import annotations

from fastapi import Request

from gateway.errors import model_not_found
from gateway.triton_client import TritonClient


async def triton(request: Request) -> TritonClient:
    """Async, so FastAPI calls it in the event loop instead of a worker thread."""
    return request.app.state.triton


async def resolve_model(request: Request, client: TritonClient, model: str) -> str:
    """The Triton model serving `model` (a name or an alias); a fresh look before saying it does not exist."""
    target = request.app.state.settings.model_aliases.get(model, model)
    if target in await client.ready_model_names():
        return target
    if target in await client.ready_model_names(fresh=True):
        return target
    raise model_not_found(model)


async def served_models(request: Request, client: TritonClient) -> list[str]:
    """Every name a client may use now: the ready Triton models and the aliases of ready models."""
    ready = await client.ready_model_names(fresh=True)
    aliases = {alias for alias, target in request.app.state.settings.model_aliases.items() if target in ready}
    return sorted(ready | aliases)
