"""Shared request dependencies."""

from __future__ import annotations

import uuid

from fastapi import Request

from gateway.admission import Admission, caller_of
from gateway.errors import model_not_found
from gateway.model_map import ready_names
from gateway.observability.request_context import request_record
from gateway.routing.fleet import Fleet


async def triton(request: Request) -> Fleet:
    """The Triton replicas. Async, so FastAPI calls it in the event loop instead of a worker thread."""
    return request.app.state.fleet


def _model_map(request: Request) -> Fleet:
    return request.app.state.fleet


def request_id(request: Request) -> str:
    """The request's id (the client's X-Request-Id or a new one), which is also its Triton request id."""
    record = request_record(request.scope)
    return record.request_id if record is not None else uuid.uuid4().hex


async def admission(request: Request) -> Admission:
    return request.app.state.admission


async def resolve_model(request: Request, model: str) -> str:
    """The Triton model serving `model` (a name or an alias), from the model map kept in memory. A model the
    caller's key may not use is as unknown as a model that does not exist."""
    target = request.app.state.settings.model_aliases.get(model, model)
    key = caller_of(request.scope).key
    if (key is None or key.allows(model, target)) and await _model_map(request).is_served(target):
        return target
    raise model_not_found(model)


async def served_models(request: Request) -> dict[str, int | None]:
    """Every name the caller may use now, with its context length (None until its backend told it): the ready
    Triton models and the aliases of ready models, less those that the caller's key may not use."""
    entries = await _model_map(request).refresh()
    ready = ready_names(entries)
    lengths = {entry.name: entry.max_model_len for entry in entries if entry.name in ready}
    aliases = request.app.state.settings.model_aliases
    names = ready | {alias for alias, target in aliases.items() if target in ready}
    key = caller_of(request.scope).key
    allowed = sorted(name for name in names if key is None or key.allows(name, aliases.get(name, name)))
    return {name: lengths[aliases.get(name, name)] for name in allowed}
