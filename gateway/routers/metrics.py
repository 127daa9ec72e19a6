"""`/metrics`: the gateway's own metrics followed by Triton's, federated at scrape time."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.observability.multiprocess import exposition

router = APIRouter(tags=["metrics"])


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    state = request.app.state
    state.runtime_metrics.refresh()
    own = exposition(state.registry, state.settings.prometheus_multiproc_dir).decode()
    federated = await state.federation.exposition()
    return Response(own + federated, media_type=CONTENT_TYPE_LATEST)
