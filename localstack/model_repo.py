"""The local stack's model repository: the checked-in model's config with the device's engine arguments."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from localstack.device import Device, engine_args_override, engine_device
from localstack.paths import DEFAULT_MODEL_NAME, REPO_ROOT

CHECKED_IN_REPOSITORY = REPO_ROOT / "model_repository"


# The share of memory one engine takes for weights plus KV cache; two engines side by side take less each.
ENGINE_MEMORY_SHARE = 0.4

# The backend's cap on streamed responses a second (off by default): on two cores the engine shares with the
# stub, Triton and the gateway, fewer, fuller responses leave the engine more CPU (bench/README.md, part 3).
CPU_STREAM_RESPONSES_PER_S = 2000
CPU_PARAMETERS = (
    "# The local stack's CPU tuning (localstack/model_repo.py).\n"
    f'parameters {{ key: "STREAM_RESPONSES_PER_S" value: {{ string_value: "{CPU_STREAM_RESPONSES_PER_S}" }} }}\n'
)


def cpu_engine_args(model_dir: Path, memory_share: float = ENGINE_MEMORY_SHARE) -> dict[str, Any]:
    """Engine arguments measured to work with vLLM's CPU build on a 2-core machine."""
    return {
        "model": str(model_dir),
        "dtype": "bfloat16",
        "max_model_len": 2048,
        # On the CPU this is the share of NUMA node 0's memory for weights plus KV cache.
        "gpu_memory_utilization": memory_share,
        "disable_log_stats": False,
        # Recomputing every prompt keeps greedy outputs identical from one request to the next
        # (a prefix-cache hit computes in another order, and bf16 rounding then differs).
        "enable_prefix_caching": False,
    }


def gpu_engine_args(model_dir: Path, memory_share: float = ENGINE_MEMORY_SHARE) -> dict[str, Any]:
    """The CPU arguments, with what a CUDA engine does differently: it runs eagerly.

    `enforce_eager` skips torch.compile and the CUDA graph captures, which on a fresh host (no compile cache)
    take tens of seconds before the first request, while the end-to-end checks exercise the backend's request
    path, not the engine's execution mode (LOCALSTACK_ENGINE_ARGS='{"enforce_eager": false}' turns them back on).
    `gpu_memory_utilization` keeps the model's share, now of the card's memory: 0.05 of 80 GiB (4 GiB) holds
    the tiny random Llama's weights and millions of tokens of cache, and the less a test engine reserves, the
    less it depends on what else the card holds. dtype, context length and prefix caching stay as on the CPU,
    which the checks rely on (`max_model_len` is asserted; greedy outputs are compared between requests).
    """
    return {**cpu_engine_args(model_dir, memory_share), "enforce_eager": True}


def engine_args(model_dir: Path, memory_share: float, device: Device) -> dict[str, Any]:
    """The device's engine arguments, with LOCALSTACK_ENGINE_ARGS merged over them."""
    base = gpu_engine_args if device == "cuda" else cpu_engine_args
    return {**base(model_dir, memory_share), **engine_args_override()}


def write_model_repository(
    target: Path,
    model_dir: Path,
    name: str = DEFAULT_MODEL_NAME,
    memory_share: float = ENGINE_MEMORY_SHARE,
    device: Device | None = None,
) -> Path:
    """A repository serving `model_dir` under `name`, configured like the checked-in model, with the engine
    arguments for `device` (None: `engine_device()`), plus the CPU tuning on a CPU only: its pacing of streamed
    responses leaves CPU time to an engine that shares the cores, which a GPU engine does not."""
    device = device or engine_device()
    model = target / name
    shutil.rmtree(model, ignore_errors=True)
    (model / "1").mkdir(parents=True)
    config = (CHECKED_IN_REPOSITORY / DEFAULT_MODEL_NAME / "config.pbtxt").read_text()
    (model / "config.pbtxt").write_text(config + (CPU_PARAMETERS if device == "cpu" else ""))
    (model / "1" / "model.json").write_text(json.dumps(engine_args(model_dir, memory_share, device), indent=2) + "\n")
    return target
