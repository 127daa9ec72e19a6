"""The servers part 5 compares, started on one CUDA host with the same engine arguments, one at a time.

- A: Triton (nvidia-pytriton's server files) running this checkout's backend, behind this checkout's gateway,
  with the flags and settings docker-compose.yml gives them;
- C / C': `vllm serve` with its defaults, C' with `--api-server-count 4`;
- E: no server, `vllm bench throughput` (`engine_ceiling`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from localstack.net import free_port, http_ok
from localstack.paths import DEFAULT_MODEL_NAME, REPO_ROOT
from localstack.processes import Service, wait_until

# Both servers get these engine arguments, and nothing else.
MAX_MODEL_LEN = 4096
GPU_MEMORY_UTILIZATION = 0.85
START_TIMEOUT_S = 600.0
# Triton's Python backend response threads as docker-compose.yml starts it (`thread-pool-size`).
COMPOSE_PYTHON_THREADS = 2


@dataclass(frozen=True)
class Served:
    """A running server: where to send `vllm bench serve`, under which model name."""

    base_url: str
    model: str


def host_env() -> dict[str, str]:
    """The environment every process here gets. flashinfer's sampler only where flashinfer is installed; the
    stub embeds the first python3 on PATH, so this interpreter's folder comes first."""
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def _wait_ready(service: Service, url: str) -> None:
    if not wait_until(lambda: http_ok(url), START_TIMEOUT_S, interval_s=1.0, while_alive=service):
        raise RuntimeError(f"{service.name} did not get ready at {url}:\n{service.log_tail()}")


@contextmanager
def vllm_serve(model_dir: Path, name: str, log_dir: Path, extra: tuple[str, ...] = ()) -> Iterator[Served]:
    """C (or C' with `extra`): vLLM's own OpenAI server with its defaults."""
    port = free_port()
    argv = [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir),
        "--load-format", "dummy", "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(MAX_MODEL_LEN), "--gpu-memory-utilization", str(GPU_MEMORY_UTILIZATION), *extra,
    ]  # fmt: skip
    label = "vllm-serve" + "".join(extra).replace("--", "-").replace(" ", "")
    service = Service(label, argv, host_env(), log_dir / f"{label}.log")
    try:
        _wait_ready(service, f"http://127.0.0.1:{port}/health")
        yield Served(f"http://127.0.0.1:{port}", name)
    finally:
        service.stop(grace_s=30)


def _triton_env() -> dict[str, str]:
    """The stub links against this Python's libpython, tritonserver against nvidia-pytriton's libraries."""
    env = host_env()
    libs = [sysconfig.get_config_var("LIBDIR") or "", str(_pytriton_libs() or "")]
    env["LD_LIBRARY_PATH"] = ":".join([*filter(None, libs), env.get("LD_LIBRARY_PATH", "")])
    return env


def _pytriton_libs() -> Path | None:
    """nvidia-pytriton's bundled libraries, which its tritonserver links against."""
    purelib = Path(sysconfig.get_paths()["purelib"]) / "nvidia_pytriton.libs"
    return purelib if purelib.is_dir() else None


def _model_repository(model_dir: Path, name: str, root: Path, backend_params: dict[str, str]) -> Path:
    """Compose's config.pbtxt (the checked-in one) with the same engine arguments C gets, and `backend_params`
    added to its parameters (for trials of the backend's settings)."""
    repository = root / "models"
    shutil.rmtree(repository, ignore_errors=True)
    (repository / name / "1").mkdir(parents=True)
    config = (REPO_ROOT / "model_repository" / DEFAULT_MODEL_NAME / "config.pbtxt").read_text()
    extra = "".join(
        f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n' for key, value in backend_params.items()
    )
    (repository / name / "config.pbtxt").write_text(config + extra)
    engine_args = {
        "model": str(model_dir),
        "load_format": "dummy",
        "max_model_len": MAX_MODEL_LEN,
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
    }
    (repository / name / "1" / "model.json").write_text(json.dumps(engine_args, indent=1) + "\n")
    return repository


def _backends(triton_home: Path, root: Path) -> Path:
    """Triton's Python backend, and this checkout's backend as `vllm`, as compose mounts it."""
    backends = root / "backends"
    shutil.rmtree(backends, ignore_errors=True)
    backends.mkdir(parents=True)
    (backends / "python").symlink_to(triton_home / "backends" / "python")
    (backends / "vllm").symlink_to(REPO_ROOT / "backend")
    return backends


@contextmanager
def stack(
    model_dir: Path, name: str, log_dir: Path, triton_home: Path, gateway_workers: int = 1,
    python_threads: int = COMPOSE_PYTHON_THREADS, backend_params: dict[str, str] | None = None,
) -> Iterator[Served]:  # fmt: skip
    """A: Triton with compose's flags, then the gateway with compose's settings, both on this host."""
    root = log_dir / "stack"
    ports = {key: free_port() for key in ("http", "grpc", "metrics", "gateway")}
    triton_argv = [
        str(triton_home / "bin" / "tritonserver"),
        f"--model-repository={_model_repository(model_dir, name, root, backend_params or {})}",
        f"--backend-directory={_backends(triton_home, root)}",
        f"--http-port={ports['http']}", f"--grpc-port={ports['grpc']}", f"--metrics-port={ports['metrics']}",
        f"--backend-config=python,thread-pool-size={python_threads}", "--grpc-infer-allocation-pool-size=512",
        "--model-control-mode=explicit", f"--load-model={name}", "--log-verbose=0",
    ]  # fmt: skip
    triton = Service("tritonserver", triton_argv, _triton_env(), log_dir / "triton.log")
    gateway = None
    try:
        _wait_ready(triton, f"http://127.0.0.1:{ports['http']}/v2/health/ready")
        env = host_env() | {
            "GATEWAY_HOST": "127.0.0.1",
            "GATEWAY_PORT": str(ports["gateway"]),
            "GATEWAY_TRITON_GRPC_URL": f"127.0.0.1:{ports['grpc']}",
            "GATEWAY_TRITON_METRICS_URLS": json.dumps([f"http://127.0.0.1:{ports['metrics']}/metrics"]),
            "GATEWAY_DATA_DIR": str(root / "gateway-data"),
            "GATEWAY_WORKERS": str(gateway_workers),
        }
        gateway = Service("gateway", [sys.executable, "-m", "gateway"], env, log_dir / "gateway.log", cwd=REPO_ROOT)
        _wait_ready(gateway, f"http://127.0.0.1:{ports['gateway']}/health/ready")
        yield Served(f"http://127.0.0.1:{ports['gateway']}", name)
    finally:
        if gateway is not None:
            gateway.stop(grace_s=45)
        triton.stop(grace_s=60)
