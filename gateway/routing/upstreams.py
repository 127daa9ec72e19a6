"""Where the Triton replicas are: the configured entries, and each replica's load read from its metrics.

Pure: DNS answers and metrics texts come in as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.observability.federation import Family

DNS_SCHEME = "dns:///"


@dataclass(frozen=True)
class UpstreamEntries:
    """`GATEWAY_TRITON_GRPC_URLS` split: fixed `host:port` replicas, and DNS names to re-resolve (a headless
    Service answers with one address per pod)."""

    static: tuple[str, ...] = ()
    dns: tuple[tuple[str, int], ...] = ()


def split_host_port(entry: str) -> tuple[str, int]:
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"`{entry}` is not host:port")
    return host.strip("[]"), int(port)


def parse_entries(text: str) -> UpstreamEntries:
    """Comma-separated `host:port` and `dns:///name:port` entries; raises ValueError on a malformed one."""
    static: list[str] = []
    dns: list[tuple[str, int]] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if entry.startswith(DNS_SCHEME):
            dns.append(split_host_port(entry[len(DNS_SCHEME) :]))
        else:
            split_host_port(entry)
            static.append(entry)
    if not static and not dns:
        raise ValueError("no Triton replica given")
    return UpstreamEntries(tuple(static), tuple(dns))


def grpc_target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def metrics_url_for(grpc_url: str, metrics_port: int) -> str:
    """A replica's metrics endpoint: its host, Triton's metrics port."""
    host, _ = split_host_port(grpc_url)
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{metrics_port}/metrics"


def metrics_urls(static: tuple[str, ...], configured: list[str], metrics_port: int) -> dict[str, str]:
    """Each fixed replica's metrics URL: `GATEWAY_TRITON_METRICS_URLS` by position when it lists one per replica
    (replicas on one host, on different ports), else the replica's host on `metrics_port`."""
    if len(configured) == len(static):
        return dict(zip(static, configured, strict=True))
    return {url: metrics_url_for(url, metrics_port) for url in static}


@dataclass
class ModelLoad:
    """One model's engine gauges on one replica."""

    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float = 0.0
    healthy: bool = True


@dataclass
class ReplicaLoad:
    by_model: dict[str, ModelLoad] = field(default_factory=dict)


_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:engine_healthy": "healthy",
}


def _model_of(labels: str) -> str | None:
    if 'model="' not in labels:
        return None
    return labels.split('model="', 1)[1].split('"', 1)[0]


def load_from_families(families: list[Family]) -> ReplicaLoad:
    """The per-model gauges of one replica's metrics (summed over model versions; kv usage at its highest)."""
    load = ReplicaLoad()
    for family in families:
        attribute = _GAUGES.get(family.name)
        if attribute is None:
            continue
        for sample in family.samples:
            labels, _, value = sample.rpartition(" ")
            model = _model_of(labels)
            if model is None:
                continue
            entry = load.by_model.setdefault(model, ModelLoad())
            number = float(value)
            if attribute == "healthy":
                entry.healthy = entry.healthy and number != 0.0
            elif attribute == "kv_cache_usage":
                entry.kv_cache_usage = max(entry.kv_cache_usage, number)
            else:
                setattr(entry, attribute, getattr(entry, attribute) + number)
    return load
