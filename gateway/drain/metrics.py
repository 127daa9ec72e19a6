"""The drain's metrics: whether a worker drains, and what it refused or cut."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class DrainMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.draining = Gauge(
            "gateway_draining",
            "1 while the gateway drains after SIGTERM: new generations are refused, those in flight finish.",
            registry=registry,
            multiprocess_mode="livemax",  # with several workers: 1 when any running worker drains
        )
        self.refused = Counter(
            "gateway_drain_refused_requests",
            "Generation requests answered 503 because the gateway was draining.",
            registry=registry,
        )
        self.cut = Counter(
            "gateway_drain_cut_generations",
            "Generations still running at the drain deadline, ended with an error event and cancelled in Triton.",
            registry=registry,
        )
