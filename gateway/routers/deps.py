"""Shared request dependencies."""

from __future__ import annotations

from fastapi import Request

from gateway.errors import model_not_found
from gateway.model_map import ModelMap, ready_names
from gateway.triton_client import TritonClient


async def triton(request: Request) -> TritonClient:
    """Async, so FastAPI calls it in the event loop instead of a worker thread."""
    return request.app.state.triton


def _model_map(request: Request) -> ModelMap:
    return request.app.state.model_map


async def resolve_model(request: Request, model: str) -> str:
    """The Triton model serving `model` (a name or an alias), from the model map kept in memory."""
    target = request.app.state.settings.model_aliases.get(model, model)
    if await _model_map(request).is_served(target):
        return target
    raise model_not_found(model)


async def served_models(request: Request) -> list[str]:
    """Every name a client may use now: the ready Triton models and the aliases of ready models."""
    ready = ready_names(await _model_map(request).refresh())
    aliases = {alias for alias, target in request.app.state.settings.model_aliases.items() if target in ready}
    return sorted(ready | aliases)
