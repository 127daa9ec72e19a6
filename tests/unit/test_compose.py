"""The compose file, checked statically (no Docker engine here): it parses, its mounts exist,
and its ports and service names agree with the gateway's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services(compose: dict) -> None:
    # Plain `docker compose up` starts these two; the monitoring profile adds Prometheus and Grafana.
    assert {name for name, s in compose["services"].items() if "profiles" not in s} == {"triton", "gateway"}


def test_mounted_paths_exist(compose: dict) -> None:
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), source


def test_backend_is_mounted_as_the_vllm_backend(compose: dict) -> None:
    volumes = compose["services"]["triton"]["volumes"]
    assert "./backend:/opt/tritonserver/backends/vllm:ro" in volumes
    assert (ROOT / "backend" / "model.py").is_file()
    for model in (ROOT / "model_repository").iterdir():
        assert 'backend: "vllm"' in (model / "config.pbtxt").read_text()
        assert (model / "1" / "model.json").is_file()


def test_gateway_reaches_tritons_grpc_and_metrics_ports(compose: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    triton, gateway = compose["services"]["triton"], compose["services"]["gateway"]
    for key, value in gateway["environment"].items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.triton_metrics_urls == ["http://triton:8002/metrics"]
    assert "--metrics-port=8002" in triton["command"]
    host, port = settings.triton_grpc_url.rsplit(":", 1)
    assert host == "triton"
    assert f"--grpc-port={port}" in triton["command"]
    assert f"{port}:{port}" in triton["ports"]
    assert f"{settings.port}:{settings.port}" in gateway["ports"]
    assert gateway["depends_on"]["triton"]["condition"] == "service_healthy"


def test_gpu_reservation_and_shared_memory(compose: dict) -> None:
    triton = compose["services"]["triton"]
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert triton["shm_size"]
    assert "healthcheck" in triton


def test_gateway_image_is_built_from_the_repo(compose: dict) -> None:
    build = compose["services"]["gateway"]["build"]
    dockerfile = (ROOT / build["context"] / build["dockerfile"]).read_text()
    assert 'CMD ["python", "-m", "gateway"]' in dockerfile


def test_triton_gets_the_local_stacks_python_backend_threads(compose: dict) -> None:
    from localstack.stack import python_backend_args

    local = [arg for arg in python_backend_args("x") if "thread-pool-size" in arg]
    assert local and all(arg in compose["services"]["triton"]["command"] for arg in local)


def test_triton_gets_the_local_stacks_grpc_allocation_pool(compose: dict) -> None:
    from localstack.stack import GRPC_INFER_ALLOCATION_POOL_SIZE

    flag = f"--grpc-infer-allocation-pool-size={GRPC_INFER_ALLOCATION_POOL_SIZE}"
    assert flag in compose["services"]["triton"]["command"]
