"""Per-replica metrics of the fleet: requests, in-flight, picks by reason, retries and ejections."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class RoutingMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "gateway_replica_requests", "Streams the gateway opened on each Triton replica.", ["replica", "model"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "gateway_replica_in_flight", "Streams open on each Triton replica.", ["replica"],
            registry=registry, multiprocess_mode="livesum",
        )
        self.picks = Counter(
            "gateway_replica_picks",
            "Replica choices by reason: only, least_load, round_robin, prefix_home (a prefix-affinity hit), "
            "prefix_spill (its home was too loaded), retry.",
            ["replica", "reason"],
            registry=registry,
        )
        self.retries = Counter(
            "gateway_replica_retries",
            "Requests retried on another replica after this one failed before the first byte (UNAVAILABLE).",
            ["replica"],
            registry=registry,
        )
        self.ejections = Counter(
            "gateway_replica_ejections",
            "Times a replica's circuit breaker for a model opened: it gets none of that model's requests until a "
            "probe succeeds.",
            ["replica", "model"],
            registry=registry,
        )
        self.replicas = Gauge(
            "gateway_replicas", "Triton replicas the gateway knows.", registry=registry, multiprocess_mode="max"
        )
