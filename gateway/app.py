"""The FastAPI application: wiring of settings, the Triton client, observability and the routers."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from prometheus_fastapi_instrumentator import Instrumentator

from gateway.admission import AdmissionMetrics, AuthMiddleware, KeyStore, build_admission
from gateway.core.caps import Caps
from gateway.drain import Drain, DrainMiddleware, SignalDrain, shutting_down
from gateway.drain.metrics import DrainMetrics
from gateway.errors import install_error_handlers
from gateway.observability.federation import TritonMetricsFederation
from gateway.observability.llm_metrics import LLMMetrics
from gateway.observability.logs import configure_logging
from gateway.observability.multiprocess import forget_this_worker
from gateway.observability.upstream_metrics import UpstreamMetrics
from gateway.observability.request_context import RequestContextMiddleware
from gateway.resilience.breaker import BreakerBoard
from gateway.resilience.deadlines import StreamDeadlines
from gateway.observability.runtime import RuntimeMetrics
from gateway.responses.store import ResponseStore, database_url
from gateway.routers import health, metrics, models, openai, responses, tokenize
from gateway.settings import Settings, get_settings
from gateway.routing.fleet import Fleet, FleetConfig
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.picker import PrefixWeights
from gateway.routing.upstreams import metrics_urls
from gateway.triton_client import TritonClient

log = logging.getLogger("gateway")


def _fleet(settings: Settings, upstream_metrics: UpstreamMetrics, routing_metrics: RoutingMetrics) -> Fleet:
    def client(url: str) -> TritonClient:
        return TritonClient(
            url,
            request_timeout_s=settings.request_timeout_s,
            health_timeout_s=settings.health_timeout_s,
            deadlines=StreamDeadlines(settings.first_token_timeout_s, settings.stall_timeout_s),
            breakers=BreakerBoard(settings.breaker_failures, settings.breaker_cooldown_s),
            metrics=upstream_metrics,
            grpc_status_codes=settings.triton_grpc_status_codes,
        )

    entries = settings.upstream_entries
    config = FleetConfig(
        policy=settings.routing,
        retries=settings.upstream_retries,
        block_chars=settings.prefix_block_chars,
        weights=PrefixWeights(settings.prefix_weight, settings.prefix_load_weight, settings.prefix_load_slack),
        index_entries=settings.prefix_index_entries,
        index_bytes=settings.prefix_index_mb * 1024 * 1024,
        model_refresh_s=settings.model_refresh_s,
        load_refresh_s=settings.load_refresh_s,
        dns_refresh_s=settings.dns_refresh_s,
        metrics_port=settings.triton_metrics_port,
        request_timeout_s=settings.request_timeout_s,
        scrape_timeout_s=settings.metrics_timeout_s,
    )
    static_metrics = metrics_urls(entries.static, settings.triton_metrics_urls, settings.triton_metrics_port)
    return Fleet(entries, static_metrics, client, config, routing_metrics)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_logging(settings.log_level)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.fleet = _fleet(settings, app.state.upstream_metrics, app.state.routing_metrics)
        await app.state.fleet.start()
        # One replica: the configured metrics endpoints, as ever; several: each replica's own.
        metrics_urls = app.state.fleet.metrics_urls if settings.triton_grpc_urls else lambda: settings.triton_metrics_urls
        app.state.federation = TritonMetricsFederation(metrics_urls, settings.metrics_timeout_s)
        app.state.admission = build_admission(settings, app.state.admission_metrics, app.state.federation)
        app.state.responses = ResponseStore(database_url(settings.database_url, settings.data_dir))
        await app.state.responses.migrate()
        stop = asyncio.Event()
        background = [asyncio.create_task(app.state.keys.watch(stop))]
        if settings.responses_retention_s is not None:
            background.append(asyncio.create_task(app.state.responses.sweep_forever(settings.responses_retention_s, stop)))
        if app.state.admission.engine_queues is not None:
            background.append(asyncio.create_task(app.state.admission.engine_queues.run(stop)))
        if not app.state.keys.table.required:
            log.warning("no API key is configured (GATEWAY_API_KEYS, GATEWAY_API_KEYS_FILE): serving without auth")
        signals = SignalDrain(app.state.drain, lambda: app.state.fleet.cut_streams(shutting_down()), drain_metrics)
        signals.install()
        # Everything made at start-up lives as long as the process: leave it out of the collector's scans.
        gc.freeze()
        try:
            yield
        finally:
            stop.set()
            await asyncio.gather(*background, return_exceptions=True)
            await app.state.admission.limiter.close()
            await app.state.responses.close()
            await signals.close()
            await app.state.federation.close()
            await app.state.fleet.close()
            forget_this_worker(settings.prometheus_multiproc_dir)

    app = FastAPI(title="Triton vLLM OpenAI gateway", lifespan=lifespan)
    app.state.settings = settings
    app.state.registry = CollectorRegistry()
    app.state.llm_metrics = LLMMetrics(app.state.registry)
    app.state.admission_metrics = AdmissionMetrics(app.state.registry)
    app.state.runtime_metrics = RuntimeMetrics(app.state.registry)
    app.state.keys = KeyStore(settings.api_keys, settings.api_keys_file)
    app.state.upstream_metrics = UpstreamMetrics(app.state.registry)
    app.state.routing_metrics = RoutingMetrics(app.state.registry)
    app.state.caps = Caps(settings.max_n, settings.max_tokens, settings.max_prompts)
    app.state.readiness = health.ReadinessCache(settings.ready_cache_s)
    app.state.drain = Drain(settings.drain_timeout_s)
    drain_metrics = DrainMetrics(app.state.registry)
    Instrumentator(registry=app.state.registry, excluded_handlers=["/metrics"]).instrument(app)
    install_error_handlers(app)
    app.include_router(openai.router)
    app.include_router(responses.router)
    app.include_router(models.router)
    app.include_router(tokenize.router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.add_middleware(
        AuthMiddleware, keys=app.state.keys, metrics_key=settings.metrics_api_key, metrics=app.state.admission_metrics
    )
    app.add_middleware(DrainMiddleware, drain=app.state.drain, on_refused=drain_metrics.refused.inc)
    # Outermost, so the request id and the log line cover every response, errors included.
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_body_bytes, log_content=settings.log_content)
    return app
