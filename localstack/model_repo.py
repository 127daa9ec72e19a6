"""The local stack's model repository: the checked-in model's config with CPU engine arguments."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

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


def write_model_repository(
    target: Path, model_dir: Path, name: str = DEFAULT_MODEL_NAME, memory_share: float = ENGINE_MEMORY_SHARE
) -> Path:
    """A repository serving `model_dir` under `name`, configured like the checked-in model, plus the CPU tuning."""
    model = target / name
    shutil.rmtree(model, ignore_errors=True)
    (model / "1").mkdir(parents=True)
    config = (CHECKED_IN_REPOSITORY / DEFAULT_MODEL_NAME / "config.pbtxt").read_text()
    (model / "config.pbtxt").write_text(config + CPU_PARAMETERS)
    (model / "1" / "model.json").write_text(json.dumps(cpu_engine_args(model_dir, memory_share), indent=2) + "\n")
    return target
