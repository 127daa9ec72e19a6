from __future__ import annotations

import pytest

from gateway.observability.federation import parse_families
from gateway.routing.readiness import ReplicaState, verdict
from gateway.routing.upstreams import load_from_families, metrics_url_for, metrics_urls, parse_entries


def test_entries_split_into_fixed_and_dns() -> None:
    entries = parse_entries("triton-0:8001, dns:///triton.default.svc.cluster.local:8001,10.0.0.7:9001")
    assert entries.static == ("triton-0:8001", "10.0.0.7:9001")
    assert entries.dns == (("triton.default.svc.cluster.local", 8001),)


@pytest.mark.parametrize("bad", ["", "triton", "triton:", "dns:///triton", "a:1,b:x"])
def test_malformed_entries_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_entries(bad)


def test_metrics_pair_by_position_or_follow_the_host() -> None:
    static = ("h1:8001", "h1:8101")
    configured = ["http://h1:8002/metrics", "http://h1:8102/metrics"]
    assert metrics_urls(static, configured, 8002)["h1:8101"] == "http://h1:8102/metrics"
    assert metrics_urls(static, ["http://localhost:8002/metrics"], 8002) == {
        "h1:8001": "http://h1:8002/metrics", "h1:8101": "http://h1:8002/metrics"}  # fmt: skip
    assert metrics_url_for("[fd00::1]:8001", 8002) == "http://[fd00::1]:8002/metrics"


METRICS = """# HELP vllm:num_requests_running Number of requests currently running on the engine.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model="m",version="1"} 3
vllm:num_requests_running{model="m",version="2"} 1
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model="m",version="1"} 2
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model="m",version="1"} 0.25
# TYPE vllm:engine_healthy gauge
vllm:engine_healthy{model="m",version="1"} 1
vllm:engine_healthy{model="sick",version="1"} 0
# TYPE nv_inference_count counter
nv_inference_count{model="m",version="1"} 7
"""


def test_a_replicas_gauges_by_model() -> None:
    load = load_from_families(parse_families(METRICS, "r"))
    m = load.by_model["m"]
    assert (m.running, m.waiting, m.kv_cache_usage, m.healthy) == (4.0, 2.0, 0.25, True)
    assert not load.by_model["sick"].healthy


def _replica(url: str, **kwargs: object) -> ReplicaState:
    return ReplicaState(url, True, True, **kwargs)  # type: ignore[arg-type]


def test_ready_while_each_model_has_a_replica() -> None:
    replicas = [
        _replica("a", models={"m": "READY"}, unhealthy=frozenset({"m"})),
        _replica("b", models={"m": "READY"}),
    ]
    result = verdict(replicas)
    assert result.ready and result.body["models"] == {"m": "READY"}
    assert [r["models"]["m"] for r in result.body["replicas"]] == ["ENGINE_UNHEALTHY", "READY"]


def test_not_ready_names_the_obstacle() -> None:
    result = verdict([_replica("a", models={"m": "READY"}, breakers_open=frozenset({"m"}))])
    assert not result.ready and result.body["reason"] == "circuit breaker open: m"
    result = verdict([ReplicaState("a", False, models={"m": "READY"})])
    assert not result.ready and result.body["reason"] == "Triton is not reachable"
    result = verdict([_replica("a", models={"m": "READY", "old": "UNAVAILABLE"})])
    assert not result.ready and result.body["reason"] == "model not ready: old"


def test_required_models_ignore_models_unloaded_on_purpose() -> None:
    replicas = [_replica("a", models={"m": "READY", "old": "UNAVAILABLE"})]
    assert verdict(replicas, ["m"]).ready
    missing = verdict(replicas, ["m", "other"])
    assert not missing.ready and missing.body["models"]["other"] == "ABSENT"


def test_a_draining_replica_serves_nothing_new() -> None:
    replicas = [ReplicaState("a", True, False, {"m": "READY"}), _replica("b", models={"m": "UNAVAILABLE"})]
    result = verdict(replicas, ["m"])
    assert not result.ready and result.body["models"]["m"] == "NOT_READY"
