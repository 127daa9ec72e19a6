"""The monitoring profile, checked statically (no Docker engine here): Prometheus scrapes the
gateway where compose runs it, Grafana is provisioned with that Prometheus, and every query of
the dashboard names a metric the gateway's /metrics actually exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from gateway.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "gateway.json"
DATASOURCE_UID = "prometheus"

# What /metrics on the gateway exposes: its own families, prometheus-fastapi-instrumentator's,
# and Triton's vllm:* / nv_inference_* families federated into it.
COUNTERS = {
    "gateway_requests_total",
    "gateway_prompt_tokens_total",
    "gateway_completion_tokens_total",
    "gateway_errors_total",
    "gateway_client_disconnects_total",
    "http_requests_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
}
GAUGES = {
    "gateway_requests_in_flight",
    "gateway_federation_up",
    "gateway_federation_duration_seconds",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:engine_healthy",
}
HISTOGRAMS = {
    "gateway_time_to_first_token_seconds",
    "gateway_inter_token_latency_seconds",
    "gateway_e2e_request_latency_seconds",
    "http_request_duration_seconds",
    "vllm:time_to_first_token_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_params_n",
}
KNOWN_SERIES = COUNTERS | GAUGES | {h + suffix for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}

# PromQL words that look like identifiers but are not metric names.
PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "and", "or", "unless", "inf", "nan",
}  # fmt: skip
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (function names, label names, keywords,
    strings, ranges and Grafana variables left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery selectors
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables
    # numbers and durations (5m, 1h30m)
    text = re.sub(r"\b\d+(?:\.\d*)?(?:e[+-]?\d+)?(?:(?:ms|[smhdwy])\d*)*\b", " ", text, flags=re.I)
    names = set()
    for match in IDENTIFIER.finditer(text):
        word = match.group()
        if word.lower() in PROMQL_KEYWORDS or re.match(r"\s*\(", text[match.end() :]):
            continue  # a keyword, or a function call
        names.add(word)
    return names


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, model) (rate(vllm:e2e_request_latency_seconds_bucket'
        '{model=~"$model", upstream!="x"}[$__rate_interval]))) / on (model) group_left '
        "sum without (instance) (gateway_requests_in_flight offset 5m) > bool 1e3"
    )
    assert metric_names(expr) == {"vllm:e2e_request_latency_seconds_bucket", "gateway_requests_in_flight"}
    assert metric_names("max(max_over_time(foo[5m:1m]))") == {"foo"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def prometheus_config() -> dict:
    return yaml.safe_load((MONITORING / "prometheus.yml").read_text())


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def all_panels(dashboard: dict) -> list[dict]:
    """Every panel, including those nested in collapsed rows."""
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def host_mounts(service: dict) -> list[str]:
    """The host paths a service bind-mounts (short and long volume syntax)."""
    sources = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                sources.append(volume["source"])
        else:
            sources.append(volume.split(":")[0])
    return sources


# --- compose ---------------------------------------------------------------------------------


def test_monitoring_services_are_behind_the_monitoring_profile(compose: dict) -> None:
    services = compose["services"]
    assert {"triton", "gateway", "prometheus", "grafana"} <= set(services)
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"], name
    for name in ("triton", "gateway"):
        assert "profiles" not in services[name], f"{name} must start with a plain `docker compose up`"


def test_monitoring_services(compose: dict) -> None:
    prometheus, grafana = compose["services"]["prometheus"], compose["services"]["grafana"]
    assert "prom/prometheus" in prometheus["image"]
    assert "./monitoring/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    assert "9090:9090" in prometheus["ports"]
    assert "gateway" in prometheus["depends_on"]

    assert "grafana/grafana" in grafana["image"]
    assert "./monitoring/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert "./monitoring/grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana["volumes"]
    assert "3000:3000" in grafana["ports"]
    assert "prometheus" in grafana["depends_on"]
    assert str(grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"]).lower() == "true"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


def test_every_relative_host_mount_exists(compose: dict) -> None:
    for name, service in compose["services"].items():
        for source in host_mounts(service):
            if source.startswith("."):
                assert source.startswith("./"), f"{name}: {source}"
                assert (ROOT / source).exists(), f"{name}: {source}"


# --- Prometheus ------------------------------------------------------------------------------


def test_prometheus_scrapes_the_gateway_every_5s(prometheus_config: dict, compose: dict) -> None:
    jobs = prometheus_config["scrape_configs"]
    assert len(jobs) == 1, "only the gateway: it federates Triton, so Triton is not scraped directly"
    job = jobs[0]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job.get("scrape_interval", prometheus_config.get("global", {}).get("scrape_interval")) == "5s"
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    assert len(targets) == 1
    host, port = targets[0].rsplit(":", 1)

    gateway = compose["services"]["gateway"]
    assert host == "gateway" and host in compose["services"]
    # The port the gateway listens on: GATEWAY_PORT, else the settings' default.
    assert int(port) == int(gateway["environment"].get("GATEWAY_PORT", Settings.model_fields["port"].default))
    # Prometheus reaches the container port on the compose network; the gateway publishes that same port.
    published = {str(p).rsplit(":", 1)[-1]: str(p).split(":")[0] for p in gateway["ports"]}
    assert published.get(port) == port


def test_prometheus_timeout_fits_in_the_interval(prometheus_config: dict) -> None:
    def seconds(duration: str) -> float:
        value, unit = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", duration).groups()
        return float(value) * {"ms": 0.001, "s": 1, "m": 60}[unit]

    glob = prometheus_config.get("global", {})
    for job in prometheus_config["scrape_configs"]:
        interval = job.get("scrape_interval", glob.get("scrape_interval", "1m"))
        timeout = job.get("scrape_timeout", glob.get("scrape_timeout", "10s"))
        assert seconds(timeout) <= seconds(interval), job["job_name"]


# --- Grafana provisioning --------------------------------------------------------------------


def test_datasource_points_at_the_prometheus_service(compose: dict) -> None:
    provisioning = yaml.safe_load((MONITORING / "grafana/provisioning/datasources/prometheus.yml").read_text())
    (datasource,) = provisioning["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["uid"] == DATASOURCE_UID
    assert datasource["isDefault"] is True
    assert datasource["url"] == "http://prometheus:9090"
    assert "prometheus" in compose["services"]
    assert "9090:9090" in compose["services"]["prometheus"]["ports"]


def test_dashboard_provider_loads_the_mounted_dashboards(compose: dict) -> None:
    provisioning = yaml.safe_load((MONITORING / "grafana/provisioning/dashboards/dashboards.yml").read_text())
    (provider,) = provisioning["providers"]
    assert provider["type"] == "file"
    path = provider["options"]["path"]
    assert path == "/var/lib/grafana/dashboards"
    mounts = {v.split(":")[1]: v.split(":")[0] for v in compose["services"]["grafana"]["volumes"]}
    assert (ROOT / mounts[path] / DASHBOARD.name).is_file()


# --- dashboard -------------------------------------------------------------------------------


def test_dashboard_identity(dashboard: dict) -> None:
    assert dashboard["uid"] == "triton-vllm-gateway"
    assert dashboard["title"] == "Triton vLLM gateway"
    assert dashboard["schemaVersion"] >= 36
    assert "id" not in dashboard or dashboard["id"] is None  # provisioned dashboards get their id from Grafana


def test_model_variable(dashboard: dict) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    model = variables["model"]
    assert model["type"] == "query"
    assert model["datasource"]["uid"] == DATASOURCE_UID
    query = model["query"]["query"] if isinstance(model["query"], dict) else model["query"]
    assert re.sub(r"\s", "", query) == "label_values(gateway_requests_total,model)"


def test_panel_ids_are_unique(dashboard: dict) -> None:
    ids = [panel["id"] for panel in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), ids


def test_every_panel_uses_the_prometheus_datasource(dashboard: dict) -> None:
    for panel in all_panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == DATASOURCE_UID, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"])["uid"] == DATASOURCE_UID, panel["title"]


def test_every_panel_queries_only_exposed_metrics(dashboard: dict) -> None:
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            names = metric_names(target["expr"])
            assert names, f"{panel['title']}: no metric in {target['expr']!r}"
            unknown = names - KNOWN_SERIES
            assert not unknown, f"{panel['title']}: {sorted(unknown)} in {target['expr']!r}"


def test_histogram_quantiles_use_buckets(dashboard: dict) -> None:
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            if "histogram_quantile" in target["expr"]:
                assert all(n.endswith("_bucket") for n in metric_names(target["expr"])), target["expr"]
                assert re.search(r"\bby\s*\([^)]*\ble\b", target["expr"]), target["expr"]


def test_dashboard_covers_the_brief(dashboard: dict) -> None:
    exprs = [t["expr"] for panel in all_panels(dashboard) for t in panel.get("targets", [])]
    used = {name for expr in exprs for name in metric_names(expr)}
    expected = {
        "gateway_completion_tokens_total",
        "gateway_prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "gateway_requests_total",
        "gateway_time_to_first_token_seconds_bucket",
        "gateway_e2e_request_latency_seconds_bucket",
        "gateway_inter_token_latency_seconds_bucket",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "gateway_errors_total",
        "gateway_client_disconnects_total",
        "vllm:engine_healthy",
        "gateway_federation_up",
    }
    assert expected <= used, sorted(expected - used)
    for q in ("0.5", "0.9", "0.99"):
        ttft = f"histogram_quantile({q}, sum by (le) (rate(gateway_time_to_first_token_seconds_bucket"
        assert any(expr.startswith(ttft) for expr in exprs), q
