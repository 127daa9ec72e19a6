"""Which GPUs the engine may use, by the stock backend's rules.

vLLM takes no device argument: placement is the CUDA_VISIBLE_DEVICES the engine
starts with. A KIND_GPU instance gets one GPU from Triton; a KIND_MODEL instance
leaves placement to vLLM unless the GPU_DEVICE_IDS parameter names the GPUs.
These functions only compute the environment; the caller sets it before the
engine starts.
"""

from __future__ import annotations

import re
from typing import Any

GPU_DEVICE_IDS = "GPU_DEVICE_IDS"
_VISIBLE = "CUDA_VISIBLE_DEVICES"
_INTEGER = re.compile(r"-?[0-9]+")


def instance_kind(kind: str) -> str:
    """Triton's args say "GPU"; the config's instance_group says "KIND_GPU". Both become "GPU"."""
    return kind.strip().upper().removeprefix("KIND_")


def _positive_int(engine_args: dict[str, Any], key: str) -> int:
    value = engine_args.get(key, 1)
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"model.json: {key} must be a positive integer, got {value!r}")
    return value


def parallel_sizes(engine_args: dict[str, Any]) -> tuple[int, int]:
    """(tensor_parallel_size, pipeline_parallel_size) from model.json; each defaults to 1."""
    return _positive_int(engine_args, "tensor_parallel_size"), _positive_int(engine_args, "pipeline_parallel_size")


def world_size(engine_args: dict[str, Any]) -> int:
    """How many GPUs one engine uses."""
    tp, pp = parallel_sizes(engine_args)
    return tp * pp


def check_instance_kind(kind: str, engine_args: dict[str, Any]) -> None:
    """Triton gives a KIND_GPU instance exactly one GPU, so a multi-GPU engine cannot run there."""
    if instance_kind(kind) == "GPU" and world_size(engine_args) > 1:
        tp, pp = parallel_sizes(engine_args)
        raise ValueError(
            f"KIND_GPU instances are for single-GPU models, but this model needs tensor_parallel_size x "
            f"pipeline_parallel_size = {tp} x {pp} = {tp * pp} GPUs: use instance_group [{{ kind: KIND_MODEL }}] "
            f"in config.pbtxt (and the {GPU_DEVICE_IDS} parameter to choose the GPUs)"
        )


def _parameter(model_config: dict[str, Any], key: str) -> str:
    entry = model_config.get("parameters", {}).get(key) or {}
    return str(entry.get("string_value", "")).strip()


def gpu_device_ids(model_config: dict[str, Any], engine_args: dict[str, Any]) -> list[int] | None:
    """The GPU_DEVICE_IDS parameter as GPU ids, or None when it is absent or empty."""
    raw = _parameter(model_config, GPU_DEVICE_IDS)
    if not raw:
        return None
    ids: list[int] = []
    for item in (part.strip() for part in raw.split(",")):
        if not _INTEGER.fullmatch(item):
            raise ValueError(
                f"{GPU_DEVICE_IDS} must be a comma-separated list of GPU ids such as '0,1', "
                f"got {raw!r}: {item!r} is not an integer"
            )
        gpu = int(item)
        if gpu < 0:
            raise ValueError(f"{GPU_DEVICE_IDS}: GPU ids must be non-negative, got {gpu} in {raw!r}")
        if gpu in ids:
            raise ValueError(f"{GPU_DEVICE_IDS}: GPU {gpu} is listed more than once in {raw!r}")
        ids.append(gpu)
    tp, pp = parallel_sizes(engine_args)
    if len(ids) != tp * pp:
        raise ValueError(
            f"{GPU_DEVICE_IDS}: {raw!r} lists {len(ids)} GPU(s), but the model needs tensor_parallel_size x "
            f"pipeline_parallel_size = {tp} x {pp} = {tp * pp}"
        )
    return ids


def ignored_device_ids(model_config: dict[str, Any], kind: str) -> str | None:
    """A warning to log when GPU_DEVICE_IDS is set on an instance that is not KIND_MODEL.

    The stock backend ignores it there without a word. We ignore it too, so its
    configurations still load, but say so: the instance runs elsewhere than the
    parameter suggests.
    """
    kind = instance_kind(kind)
    if kind == "MODEL" or not _parameter(model_config, GPU_DEVICE_IDS):
        return None
    where = "the GPU Triton assigns" if kind == "GPU" else "the CPU"
    return f"{GPU_DEVICE_IDS} applies to KIND_MODEL instances only; this KIND_{kind} instance ignores it, uses {where}"


def _visible_gpus(ids: list[int], visible: str | None) -> list[str]:
    """Triton numbers GPUs among those already visible to it, so ids index the inherited list."""
    if visible is None:
        return [str(gpu) for gpu in ids]
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    for gpu in ids:
        if gpu >= len(entries):
            raise ValueError(
                f"GPU {gpu} is not available: {_VISIBLE}={visible!r} leaves {len(entries)} GPU(s) visible "
                f"(numbered from 0)"
            )
    return [entries[gpu] for gpu in ids]


def engine_environment(
    model_config: dict[str, Any],
    engine_args: dict[str, Any],
    kind: str,
    device_id: str,
    visible: str | None = None,
) -> dict[str, str]:
    """The environment variables the engine must start with; empty when vLLM may choose.

    `kind` and `device_id` are Triton's `model_instance_kind` and `model_instance_device_id`
    args. `visible` is the CUDA_VISIBLE_DEVICES the process inherited (None when unset): ids are
    positions in it, as they are for Triton itself, where the stock backend would overwrite it and
    pin the engine to a GPU Triton never had.
    """
    check_instance_kind(kind, engine_args)
    kind = instance_kind(kind)
    if kind == "GPU":
        if not _INTEGER.fullmatch(str(device_id).strip()):
            raise ValueError(f"model_instance_device_id must be an integer, got {device_id!r}")
        gpu = int(device_id)
        ids = [gpu] if gpu >= 0 else None
    elif kind == "MODEL":
        ids = gpu_device_ids(model_config, engine_args)
    else:
        ids = None
    if ids is None:
        return {}
    return {_VISIBLE: ",".join(_visible_gpus(ids, visible))}
