"""The FastAPI application: wiring of settings, the Triton client and the routers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gateway.errors import install_error_handlers
from gateway.routers import health, models, openai
from gateway.settings import Settings, get_settings
from gateway.triton_client import TritonClient


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.triton = TritonClient(
            settings.triton_grpc_url,
            request_timeout_s=settings.request_timeout_s,
            health_timeout_s=settings.health_timeout_s,
            model_cache_s=settings.model_cache_s,
        )
        try:
            yield
        finally:
            await app.state.triton.close()

    app = FastAPI(title="Triton vLLM OpenAI gateway", lifespan=lifespan)
    app.state.settings = settings
    install_error_handlers(app)
    app.include_router(openai.router)
    app.include_router(models.router)
    app.include_router(health.router)
    return app
