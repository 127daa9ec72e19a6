"""Which device the local stack's engine runs on: vLLM's CPU build here, its CUDA build on a GPU host.

The stack and its tests are the same on both; only the engine arguments (`localstack.model_repo`) and the core
placement (`localstack.placement`, for CPU engines only) follow the device. `scripts/gpu_e2e.sh` sets
LOCALSTACK_DEVICE=cuda; left unset, a host counts as a CUDA host when it has both an NVIDIA device and a torch
built for CUDA (checked on disk, without importing torch: the test process has no use for a CUDA context).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any, Literal

Device = Literal["cpu", "cuda"]
DEVICES: tuple[Device, ...] = ("cpu", "cuda")

DEVICE_VAR = "LOCALSTACK_DEVICE"
# A JSON object merged over the engine arguments the stack writes (either device): lets a run on a host this
# project cannot reach adjust an argument, e.g. '{"enforce_eager": false}', without a commit.
ENGINE_ARGS_VAR = "LOCALSTACK_ENGINE_ARGS"

NVIDIA_DEVICE_FILES = (Path("/dev/nvidiactl"), Path("/dev/nvidia0"))


def _torch_has_cuda() -> bool:
    """Whether the importable torch is a CUDA build: its libtorch_cuda.so ships beside libtorch_cpu.so."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False
    return any((Path(spec.origin).parent / "lib").glob("libtorch_cuda*.so*"))


def engine_device() -> Device:
    """LOCALSTACK_DEVICE when set ("cpu" or "cuda"), else "cuda" on a host with an NVIDIA device and a CUDA
    torch, else "cpu"."""
    configured = os.environ.get(DEVICE_VAR, "").strip().lower()
    if configured:
        if configured not in DEVICES:
            raise ValueError(f"{DEVICE_VAR}={configured!r}: expected one of {', '.join(DEVICES)}")
        return configured  # type: ignore[return-value]
    if any(path.exists() for path in NVIDIA_DEVICE_FILES) and _torch_has_cuda():
        return "cuda"
    return "cpu"


def engine_args_override() -> dict[str, Any]:
    """LOCALSTACK_ENGINE_ARGS as a dict ({} when unset)."""
    raw = os.environ.get(ENGINE_ARGS_VAR, "").strip()
    if not raw:
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(f"{ENGINE_ARGS_VAR} must be a JSON object, got {raw!r}")
    return value
