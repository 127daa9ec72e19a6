"""Admission's metrics. Keys appear by name, never by value."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

NO_KEY = "none"  # the key label of requests without a known key (open gateway, failed auth)


class AdmissionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.in_flight = Gauge(
            "gateway_admission_in_flight",
            "Generations holding one of the GATEWAY_MAX_IN_FLIGHT slots.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.queued = Gauge(
            "gateway_admission_queued",
            "Generations waiting for a slot (at most GATEWAY_MAX_QUEUED).",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.rejections = Counter(
            "gateway_rejections",
            "Requests refused before generation, by reason (auth, rate_limit, queue_full, queue_timeout, shed, "
            "unavailable) and key name.",
            ["reason", "key"],
            registry=registry,
        )
        self.key_tokens = Counter(
            "gateway_key_tokens",
            "Tokens (prompt and completion) counted against each key's tokens-per-minute limit.",
            ["key"],
            registry=registry,
        )
