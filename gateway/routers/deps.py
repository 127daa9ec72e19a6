"""Shared request dependencies."""

from __future__ import annotations

from fastapi import Request

from gateway.errors import model_not_found
from gateway.triton_client import TritonClient


def triton(request: Request) -> TritonClient:
    return request.app.state.triton


async def resolve_model(client: TritonClient, model: str) -> str:
    """The Triton model serving `model`; a fresh look before saying it does not exist."""
    if model in await client.ready_model_names():
        return model
    if model in await client.ready_model_names(fresh=True):
        return model
    raise model_not_found(model)
