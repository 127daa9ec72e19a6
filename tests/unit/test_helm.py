"""The Helm chart (deploy/helm/triton-vllm-gateway), checked offline: rendered by Helm's Go SDK for several value
sets, every object validated strictly against Kubernetes' schemas (tests/helm_chart.py), and the fields that
matter asserted: probes, grace periods against the drains, GPUs, shared memory, Triton's arguments (the same
as docker-compose.yml's), and the gateway's upstreams pointing at the Triton StatefulSet."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from gateway.routing.upstreams import UpstreamEntries
from gateway.settings import Settings
from tests.helm_chart import CHART, NAMESPACE, RELEASE, ROOT, by_kind, one, problems, render, rendered_text

SCALED: dict[str, Any] = {
    "triton": {"replicas": 3, "hfCache": {"persistence": True}, "hfToken": {"existingSecret": "hf"}},
    "modelRepository": {"source": "pvc", "pvc": {"create": True, "storageClassName": "nfs"}},
    "monitoring": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "grafanaDashboard": {"enabled": True},
    },
    "gateway": {
        "workers": 2,
        "requiredModels": ["smollm2-135m-instruct"],
        "apiKeys": {"keysFile": '{"name": "team-a", "key": "sk-a", "rpm": 60}\n'},
        "redis": {"url": "redis://redis:6379/0"},
        "metricsApiKey": {"existingSecret": "metrics"},
        "env": {"GATEWAY_MAX_IN_FLIGHT": 64, "GATEWAY_ROUTING": "prefix"},
    },
}
EXTERNAL: dict[str, Any] = {
    # Triton elsewhere (the chart's StatefulSet off), an existing claim and Secrets, fixed gateway replicas.
    "triton": {"enabled": False},
    "modelRepository": {"source": "pvc", "pvc": {"claimName": "models"}},
    "gateway": {
        "tritonGrpcUrls": ["triton-a:8001", "dns:///triton.gpu.svc.cluster.local:8001"],
        "tritonMetricsUrls": ["http://triton-a:8002/metrics"],
        "apiKeys": {"existingSecret": "keys"},
        "autoscaling": {"enabled": False},
        "pdb": {"enabled": False},
        "replicas": 3,
    },
}
ONE_REPLICA_CONFIGMAP: dict[str, Any] = {}
VALUE_SETS = {"default": ONE_REPLICA_CONFIGMAP, "scaled": SCALED, "external": EXTERNAL}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


def gateway_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "Deployment", "gateway")["spec"]["template"]["spec"]["containers"][0]


def triton_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "StatefulSet", "triton")["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return render(ONE_REPLICA_CONFIGMAP)


@pytest.fixture(scope="module")
def scaled() -> list[dict[str, Any]]:
    return render(SCALED)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


# --- every object valid, on the oldest and newest Kubernetes -------------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_value_sets_render_valid_objects(name: str) -> None:
    objects = render(VALUE_SETS[name])
    assert objects
    assert problems(objects) == []


def test_value_sets_render_what_they_ask_for(default: list, scaled: list) -> None:
    kinds = lambda objects: sorted(obj["kind"] for obj in objects)  # noqa: E731
    assert kinds(default) == sorted(
        ["Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"]
        + ["StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget"]
    )
    assert {"ServiceMonitor", "Secret", "PersistentVolumeClaim", "ConfigMap"} <= set(kinds(scaled))
    external = render(EXTERNAL)
    assert not by_kind(external, "StatefulSet") and not by_kind(external, "HorizontalPodAutoscaler")
    assert one(external, "Deployment")["spec"]["replicas"] == 3


def test_the_kubernetes_validate_cli_passes_the_default_render(tmp_path: Path, default: list) -> None:
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(rendered_text())
    run = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", "1.29.0", str(manifest)],
        capture_output=True, text=True, timeout=60,
    )
    lines = run.stdout.splitlines()
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(lines) == len(default) and all(line.startswith("INFO") for line in lines), run.stdout


def test_helm_lint_finds_nothing_to_fix() -> None:
    report = helm_python.lint(CHART, strict=True, kube_version="v1.29.0")
    assert report["errors"] == []
    # Severity 1 is informational ("icon is recommended"); 2 and 3 are warnings and errors.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_the_packaged_chart_carries_the_linked_files(tmp_path: Path) -> None:
    # files/ links to the repository's model_repository/ and dashboard; `helm package` must copy them in.
    archive = helm_python.package(CHART, destination=tmp_path)
    values = {"monitoring": {"grafanaDashboard": {"enabled": True}}}
    with helm_python.Chart.load(archive) as chart:
        packaged = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert [doc for text in packaged.values() for doc in yaml.safe_load_all(text) if doc] == render(values)


# --- broken values and APIs fail ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"gateway": {"containerSecurityContext": {"runAsUser": "nobody"}}}, "runAsUser"),
        # A misspelt field: only the strict schemas catch it.
        ({"gateway": {"containerSecurityContext": {"readOnlyRootFileSystem": True}}}, "readOnlyRootFileSystem"),
        ({"gateway": {"podSecurityContext": {"fsGroup": "nogroup"}}}, "'nogroup' is not of type"),
        ({"monitoring": {"serviceMonitor": {"enabled": True, "interval": "15 seconds"}}}, "15 seconds"),
    ],
)
def test_broken_values_fail_validation(values: dict[str, Any], expected: str) -> None:
    found = problems(render(values))
    assert found, values
    assert any(expected in problem.message for problem in found), found


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [
        ("HorizontalPodAutoscaler", "autoscaling/v2beta2"),
        ("PodDisruptionBudget", "policy/v1beta1"),
        ("Deployment", "apps/v1beta1"),
    ],
)
def test_removed_apis_fail(default: list, kind: str, api_version: str) -> None:
    obj = {**one(default, kind, "gateway"), "apiVersion": api_version}
    found = problems([obj])
    assert [p.version for p in found] == ["1.29.0", "1.37.0"]
    assert all("Couldn't find schema" in p.message for p in found)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"gateway": {"terminationGracePeriodSeconds": 30}}, "must exceed preStopSleepSeconds + drainTimeoutSeconds"),
        ({"triton": {"terminationGracePeriodSeconds": 70}}, "must exceed preStopSleepSeconds + exitTimeoutSeconds"),
        # values.schema.json: closed objects, so a misspelt key fails instead of keeping a default silently.
        ({"modelRepository": {"source": "s3"}}, "at '/modelRepository/source': value must be one of"),
        ({"triton": {"probes": {"readiness": {"periodSecond": 5}}}}, "additional properties 'periodSecond'"),
        ({"gateway": {"drainTimeoutSecond": 60}}, "additional properties 'drainTimeoutSecond'"),
        ({"gateway": {"autoscaling": {"enabled": False}, "replicas": "two"}}, "at '/gateway/replicas': got string"),
    ],
)
def test_values_the_chart_refuses(values: dict[str, Any], expected: str) -> None:
    with pytest.raises(helm_python.HelmError, match=re.escape(expected)):
        render(values)


# --- the gateway ----------------------------------------------------------------------------------------------


def test_gateway_probes(default: list) -> None:
    container = gateway_container(default)
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["http"]
    assert port == Settings().port == 9000
    assert container["startupProbe"]["httpGet"] == {"path": "/health/live", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "http"}


@pytest.mark.parametrize("drain", [30, 120, 2.5])
def test_gateway_grace_period_covers_prestop_and_drain(drain: float) -> None:
    objects = render({"gateway": {"drainTimeoutSeconds": drain}})
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    assert float(env_of(container)["GATEWAY_DRAIN_TIMEOUT_S"]) == drain
    # The gateway exits ~7 s after its drain (docs/operations.md: Stopping); the grace period leaves room for it.
    assert pod["terminationGracePeriodSeconds"] >= int(sleep[1]) + drain + 7


def test_gateway_reaches_the_triton_statefulset(scaled: list, monkeypatch: pytest.MonkeyPatch) -> None:
    statefulset = one(scaled, "StatefulSet")
    headless = one(scaled, "Service", "triton")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is False  # a pod not ready is not picked
    assert statefulset["spec"]["serviceName"] == headless["metadata"]["name"]
    host = f"{headless['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
    ports = {p["name"]: p["port"] for p in headless["spec"]["ports"]}
    env = env_of(gateway_container(scaled))
    assert env["GATEWAY_TRITON_GRPC_URLS"] == f"dns:///{host}:{ports['grpc']}"
    # Each address the name resolves to is a replica, scraped on Triton's metrics port (no per-pod list).
    assert "GATEWAY_TRITON_METRICS_URLS" not in env
    # The settings read what the chart writes.
    for name, value in env.items():
        if isinstance(value, str):
            monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.upstream_entries == UpstreamEntries(static=(), dns=((host, ports["grpc"]),))
    assert settings.triton_metrics_port == ports["metrics"]
    assert settings.required_model_names == ["smollm2-135m-instruct"]
    assert settings.routing == "prefix"
    assert settings.drain_timeout_s == 30 and settings.workers == 2 and settings.max_in_flight == 64


def test_external_triton_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_of(gateway_container(render(EXTERNAL)))
    for name, value in env.items():
        if isinstance(value, str):
            monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.upstream_entries == UpstreamEntries(
        static=("triton-a:8001",), dns=(("triton.gpu.svc.cluster.local", 8001),)
    )
    assert settings.triton_metrics_urls == ["http://triton-a:8002/metrics"]
    with pytest.raises(helm_python.HelmError, match="set gateway.tritonGrpcUrls"):
        render({"triton": {"enabled": False}})


def test_triton_leaves_dns_before_it_stops(default: list) -> None:
    # The preStop sleep outlasts one DNS refresh of the gateways plus CoreDNS' 5 s TTL: no new request reaches a
    # Triton after its SIGTERM.
    refresh = float(env_of(gateway_container(default))["GATEWAY_DNS_REFRESH_S"])
    sleep = int(triton_pod(default)["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][1])
    assert sleep >= refresh + 5


def test_gateway_settings_names_exist(scaled: list) -> None:
    # Every GATEWAY_* variable the chart sets is a setting (a misspelt one would be ignored by the gateway).
    known = {f"GATEWAY_{name.upper()}" for name in Settings.model_fields}
    names = {name for name in env_of(gateway_container(scaled)) if name.startswith("GATEWAY_")}
    assert names <= known, names - known


def test_gateway_secrets(scaled: list) -> None:
    container = gateway_container(scaled)
    env = env_of(container)
    secret = one(scaled, "Secret")
    assert secret["stringData"]["keys.jsonl"] == SCALED["gateway"]["apiKeys"]["keysFile"]
    assert env["GATEWAY_REDIS_URL"] == {"secretKeyRef": {"name": secret["metadata"]["name"], "key": "redis-url"}}
    assert env["GATEWAY_METRICS_API_KEY"] == {"secretKeyRef": {"name": "metrics", "key": "metrics-api-key"}}
    # Mounted as a folder, not a subPath: Kubernetes swaps the folder's symlink and the gateway re-reads the file.
    mount = next(m for m in container["volumeMounts"] if m["name"] == "keys")
    assert "subPath" not in mount
    assert env["GATEWAY_API_KEYS_FILE"] == f"{mount['mountPath']}/keys.jsonl"
    # Several workers share metrics in a folder the gateway makes under /tmp: writable under a read-only root.
    assert env["GATEWAY_WORKERS"] == "2" and "PROMETHEUS_MULTIPROC_DIR" not in env
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_new_keys_reach_running_pods_and_a_new_redis_url_rolls_them(scaled: list) -> None:
    def template(gateway: dict[str, Any]) -> dict[str, Any]:
        values = {**SCALED, "gateway": {**SCALED["gateway"], **gateway}}
        return one(render(values), "Deployment")["spec"]["template"]

    before = one(scaled, "Deployment")["spec"]["template"]
    assert template({"apiKeys": {"keysFile": '{"name": "b", "key": "sk-b"}\n'}}) == before
    assert template({"redis": {"url": "redis://other:6379/0"}}) != before


def test_hpa_pdb_and_services_select_the_gateway(default: list) -> None:
    deployment = one(default, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    hpa = one(default, "HorizontalPodAutoscaler")
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"]}
    assert hpa["spec"]["scaleTargetRef"] == target
    assert "replicas" not in deployment["spec"]  # the HPA owns it
    assert gateway_container(default)["resources"]["requests"]["cpu"]  # CPU utilisation needs a request
    assert one(default, "PodDisruptionBudget", "gateway")["spec"]["selector"] == deployment["spec"]["selector"]
    assert one(default, "Service", "gateway")["spec"]["selector"].items() <= pod_labels.items()
    statefulset = one(default, "StatefulSet")
    triton_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert one(default, "Service", "triton")["spec"]["selector"].items() <= triton_labels.items()
    assert not one(default, "Service", "triton")["spec"]["selector"].items() <= pod_labels.items()
    assert one(default, "PodDisruptionBudget", "triton")["spec"]["selector"] == statefulset["spec"]["selector"]


# --- Triton ---------------------------------------------------------------------------------------------------


def test_triton_runs_composes_command(default: list, compose: dict) -> None:
    container = triton_pod(default)["containers"][0]
    service = compose["services"]["triton"]
    assert container["image"] == service["image"].split(":-", 1)[1].rstrip("}")
    assert container["args"] == [*service["command"], "--exit-timeout-secs=60"]


def test_triton_mounts_our_backend_over_the_stock_one(default: list, compose: dict) -> None:
    pod = triton_pod(default)
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    compose_target = next(v for v in compose["services"]["triton"]["volumes"] if v.startswith("./backend:"))
    backend_path = compose_target.split(":")[1]
    assert mounts[backend_path] == "backend"
    init = pod["initContainers"][0]
    assert init["command"][-1] == next(m["mountPath"] for m in init["volumeMounts"] if m["name"] == "backend") + "/"
    assert init["image"].startswith("triton-vllm-gateway-backend:")
    # deploy/backend.Dockerfile puts the backend where the init container copies it from.
    dockerfile = (ROOT / "deploy" / "backend.Dockerfile").read_text()
    assert f"COPY backend {init['command'][2].removesuffix('/.')}" in dockerfile
    without = triton_pod(render({"triton": {"backend": {"enabled": False}}}))
    assert "initContainers" not in without
    assert backend_path not in {m["mountPath"] for m in without["containers"][0]["volumeMounts"]}


def test_triton_gpus_shared_memory_and_probes(scaled: list) -> None:
    pod = triton_pod(scaled)
    container = pod["containers"][0]
    resources = container["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 1
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory" and shm["emptyDir"]["sizeLimit"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert container["startupProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert one(scaled, "StatefulSet")["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "hf-cache"
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "hf-token"}}} in container["env"]


def test_triton_grace_period_is_longer_than_its_drain_and_the_gateways(default: list) -> None:
    pod = triton_pod(default)
    container = pod["containers"][0]
    exit_timeout = int(next(a for a in container["args"] if a.startswith("--exit-timeout-secs=")).split("=")[1])
    sleep = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] > sleep + exit_timeout
    # A stream the gateway is still draining can finish on Triton.
    assert exit_timeout >= float(env_of(gateway_container(default))["GATEWAY_DRAIN_TIMEOUT_S"])


# --- the model repository -------------------------------------------------------------------------------------


def test_model_repository_from_a_configmap_is_the_repos(default: list) -> None:
    pod = triton_pod(default)
    assert "--model-repository=/models" in pod["containers"][0]["args"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in pod["containers"][0]["volumeMounts"]
    volume = next(v for v in pod["volumes"] if v["name"] == "models")["configMap"]
    data = one(default, "ConfigMap")["data"]
    assert volume["name"] == one(default, "ConfigMap")["metadata"]["name"]
    files = {item["path"]: data[item["key"]] for item in volume["items"]}
    repo = ROOT / "model_repository"
    expected = {str(p.relative_to(repo)): p.read_text() for p in repo.rglob("*") if p.is_file()}
    assert files == expected and "smollm2-135m-instruct/config.pbtxt" in files


def test_model_repository_from_values() -> None:
    models = {"tiny": {"config.pbtxt": 'backend: "vllm"\n', "1/model.json": '{"model": "x"}'}}
    objects = render({"modelRepository": {"configMap": {"models": models}}})
    volume = next(v for v in triton_pod(objects)["volumes"] if v["name"] == "models")["configMap"]
    data = one(objects, "ConfigMap")["data"]
    assert {item["path"]: data[item["key"]] for item in volume["items"]} == {
        "tiny/config.pbtxt": 'backend: "vllm"\n',
        "tiny/1/model.json": '{"model": "x"}',
    }


def test_model_repository_from_a_pvc(scaled: list) -> None:
    claim = one(scaled, "PersistentVolumeClaim")
    volume = next(v for v in triton_pod(scaled)["volumes"] if v["name"] == "models")
    assert volume["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"], "readOnly": True}
    assert claim["spec"]["storageClassName"] == "nfs"
    assert not [c for c in by_kind(scaled, "ConfigMap") if c["metadata"]["name"].endswith("-models")]
    existing = next(v for v in triton_pod(render(EXTERNAL | {"triton": {}}))["volumes"] if v["name"] == "models")
    assert existing["persistentVolumeClaim"]["claimName"] == "models"


# --- monitoring -----------------------------------------------------------------------------------------------


def test_service_monitor_scrapes_the_gateway(scaled: list) -> None:
    monitor = one(scaled, "ServiceMonitor")
    service = one(scaled, "Service", "gateway")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["credentials"] == {"name": "metrics", "key": "metrics-api-key"}


def test_grafana_dashboard_is_the_repos(scaled: list) -> None:
    configmaps = by_kind(scaled, "ConfigMap")
    dashboards = [c for c in configmaps if c["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert len(dashboards) == 1
    [content] = dashboards[0]["data"].values()
    assert json.loads(content) == json.loads((ROOT / "monitoring/grafana/dashboards/gateway.json").read_text())
