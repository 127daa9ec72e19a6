"""Metrics of the gateway's streams to Triton: their gRPC statuses, deadlines, cancellations and fail-fasts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class UpstreamMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.statuses = Counter(
            "gateway_triton_streams",
            "Streams to Triton by final gRPC status code (CANCELLED: the gateway cancelled it; UNKNOWN: an error "
            "in the stream from a Triton without gRPC status codes in streams).",
            ["model", "code"],
            registry=registry,
        )
        self.deadlines = Counter(
            "gateway_deadlines_fired",
            "Deadlines that ended a generation, by kind (first_token, stall, total).",
            ["model", "kind"],
            registry=registry,
        )
        self.cancellations = Counter(
            "gateway_triton_cancellations",
            "Triton requests the gateway cancelled, by reason: deadline; error (an error in the stream); closed "
            "(the gateway stopped reading: the client disconnected, or another prompt of the request failed).",
            ["model", "reason"],
            registry=registry,
        )
        self.breaker_rejections = Counter(
            "gateway_breaker_rejections",
            "Requests failed fast with a 503 because the model's circuit breaker was open.",
            ["model"],
            registry=registry,
        )
