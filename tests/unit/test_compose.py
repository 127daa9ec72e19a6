"""The compose file, checked statically (no Docker engine here): it parses, its mounts exist,
and its ports and service names agree with the gateway's settings."""

from __future__ import annotations

import re
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
    from localstack.triton_server import python_backend_args

    local = [arg for arg in python_backend_args("x") if "thread-pool-size" in arg]
    assert local and all(arg in compose["services"]["triton"]["command"] for arg in local)


def test_triton_gets_the_local_stacks_grpc_allocation_pool(compose: dict) -> None:
    from localstack.triton_server import GRPC_INFER_ALLOCATION_POOL_SIZE

    flag = f"--grpc-infer-allocation-pool-size={GRPC_INFER_ALLOCATION_POOL_SIZE}"
    assert flag in compose["services"]["triton"]["command"]


def _default_image(text: str) -> str:
    match = re.search(r"\$\{TRITON_IMAGE:-([^}]+)\}", text)
    assert match, "TRITON_IMAGE needs a default"
    return match.group(1)


def _readme_releases() -> dict[str, str]:
    """NGC release -> the row's check column, from the table of NGC releases in docs/vllm-releases.md."""
    rows = {}
    for line in (ROOT / "docs" / "vllm-releases.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"\d\d\.\d\d( \(.*\))?", cells[0]):
            rows[cells[0].split()[0]] = cells[4]
    return rows


def test_default_image_is_a_checked_release_of_the_readme_table(compose: dict) -> None:
    image = _default_image(compose["services"]["triton"]["image"])
    repository, _, tag = image.partition(":")
    assert repository == "nvcr.io/nvidia/tritonserver" and tag.endswith("-vllm-python-py3"), image
    release = tag.removesuffix("-vllm-python-py3")
    rows = _readme_releases()
    assert release in rows, f"{release} is not in docs/vllm-releases.md's table of NGC releases ({sorted(rows)})"
    assert "PASS" in rows[release], rows[release]
    # The newest release of the table whose vLLM passed is the default.
    passing = [name for name, check in rows.items() if "PASS" in check and "every release" not in check]
    assert release == max(passing), passing


def test_dockerfile_triton_upgrades_the_default_image_and_keeps_our_backend(compose: dict) -> None:
    dockerfile = (ROOT / "Dockerfile.triton").read_text()
    image = _default_image(compose["services"]["triton"]["image"])
    assert f"ARG TRITON_IMAGE={image}" in dockerfile
    assert "COPY backend/ /opt/tritonserver/backends/vllm/" in dockerfile
    assert re.search(r'pip install .*"vllm==\$\{VLLM_VERSION\}"', dockerfile)


def test_part5_starts_triton_with_composes_python_backend_threads(compose: dict) -> None:
    from bench.gpu_host.servers import COMPOSE_PYTHON_THREADS

    flag = f"--backend-config=python,thread-pool-size={COMPOSE_PYTHON_THREADS}"
    assert flag in compose["services"]["triton"]["command"]
