"""How the local stack runs Triton: its command line, its environment and its backend directory.

Kept apart from the stack's life cycle (`localstack.stack`) so that compose's settings can be checked against
the same values (tests/unit/test_compose.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from localstack.paths import BACKEND_DIR, python_lib_dir, triton_libs_dir
from localstack.processes import RUN_MARKER

# Triton's Python backend hands every response a model sends to a thread pool of its model instance, 32
# threads unless told otherwise. Our backend sends one response at a time, from one thread, so two threads
# are plenty; with 32, Triton and the stub spent about 30% more CPU per streamed token (bench/README.md, Kept).
PYTHON_BACKEND_THREADS = 2

# gRPC request/response objects Triton keeps for reuse (default 8): at least the streams in flight, or it allocates.
GRPC_INFER_ALLOCATION_POOL_SIZE = 512


def python_backend_args(shm_prefix: str) -> list[str]:
    """Triton's options for its Python backend. Distinct shared-memory names let several servers share a machine."""
    return [
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
        f"--backend-config=python,thread-pool-size={PYTHON_BACKEND_THREADS}",
    ]


def backends_dir(run_dir: Path, python_backend: Path) -> Path:
    """Triton's backend directory for a run: its Python backend, and ours as `vllm`."""
    backends = run_dir / "backends"
    backends.mkdir(parents=True, exist_ok=True)
    for name, target in (("python", python_backend), ("vllm", BACKEND_DIR)):
        link = backends / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)
    return backends


def triton_env(run_dir: Path, backend_venv: Path | None, engine_core: int | None) -> dict[str, str]:
    """Triton's environment: the stub's Python from `backend_venv` (None: this interpreter's), the engine on
    `engine_core` (None: vLLM's choice), and the run's marker inherited by every process it starts."""
    env = dict(os.environ)
    venv_bin = str(backend_venv / "bin") if backend_venv is not None else str(Path(sys.executable).parent)
    if backend_venv is not None:  # vLLM's compile cache is keyed so that releases overwrite each other's entries
        env["VLLM_CACHE_ROOT"] = str(backend_venv / "vllm-cache")
    # The stub embeds the first `python3` on PATH and ignores PYTHONPATH.
    env["PATH"] = f"{venv_bin}:{env.get('PATH', '')}"
    # The interpreter's own libpython first, so the stub embeds the same build as the venv.
    env["LD_LIBRARY_PATH"] = ":".join(
        p for p in (str(python_lib_dir()), str(triton_libs_dir()), env.get("LD_LIBRARY_PATH", "")) if p
    )
    env.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    # vLLM's AOT compile cache does not load on the CPU (0.32 with torch 2.13: "'function' object has no attribute
    # 'finalize_loading'"), so every engine start traced the model again, about 50 s for SmolLM2 on two cores. Its
    # older compile cache loads: a restart then compiles nothing.
    env.setdefault("VLLM_USE_AOT_COMPILE", "0")
    env["LC_ALL"] = "C.UTF-8"
    # Inherited by every process Triton starts (stubs, engines), so strays can be found later.
    env[RUN_MARKER] = str(run_dir)
    env["HF_HUB_OFFLINE"] = "1"
    if engine_core is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(engine_core)
    env.pop("PYTHONPATH", None)
    return env


def triton_argv(
    triton_bin: Path, repository: Path, backends: Path, ports: tuple[int, int, int], models: list[str], shm_prefix: str
) -> list[str]:
    """Triton's command line: `ports` are HTTP, gRPC and metrics; `models` are loaded at start."""
    http_port, grpc_port, metrics_port = ports
    return [
        str(triton_bin),
        f"--model-repository={repository}",
        f"--backend-directory={backends}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        *python_backend_args(shm_prefix),
        f"--grpc-infer-allocation-pool-size={GRPC_INFER_ALLOCATION_POOL_SIZE}",
        # Explicit control lets the backend unload a model whose engine died, as the stock backend does.
        "--model-control-mode=explicit",
        *(f"--load-model={model}" for model in models),
        "--log-verbose=0",
    ]
