from __future__ import annotations

from typing import Any

import pytest

from vllm_backend.devices import (
    check_instance_kind,
    engine_environment,
    gpu_device_ids,
    ignored_device_ids,
    instance_kind,
    world_size,
)


def config(device_ids: str | None = None, kind: str = "KIND_MODEL") -> dict[str, Any]:
    parameters = {} if device_ids is None else {"GPU_DEVICE_IDS": {"string_value": device_ids}}
    return {"instance_group": [{"kind": kind, "count": 1}], "parameters": parameters}


TP2 = {"model": "m", "tensor_parallel_size": 2}


def test_instance_kind_accepts_both_spellings() -> None:
    assert instance_kind("KIND_GPU") == instance_kind("GPU") == instance_kind(" gpu ") == "GPU"
    assert instance_kind("KIND_MODEL") == "MODEL"


def test_world_size_multiplies_and_takes_strings() -> None:
    assert world_size({}) == 1
    assert world_size({"tensor_parallel_size": 2, "pipeline_parallel_size": "3"}) == 6


@pytest.mark.parametrize("value", [0, -1, "two", 1.5, True, None])
def test_world_size_rejects_bad_sizes(value: Any) -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size must be a positive integer"):
        world_size({"tensor_parallel_size": value})


def test_kind_gpu_rejects_multi_gpu_models() -> None:
    with pytest.raises(ValueError, match="KIND_GPU .* 1 x 2 = 2 GPUs: use .*KIND_MODEL"):
        check_instance_kind("GPU", {"pipeline_parallel_size": 2})
    check_instance_kind("GPU", {"tensor_parallel_size": 1})
    check_instance_kind("MODEL", TP2)


def test_device_ids_parse() -> None:
    assert gpu_device_ids(config(" 3, 1 "), TP2) == [3, 1]
    assert gpu_device_ids(config(""), TP2) is None
    assert gpu_device_ids(config(), TP2) is None


@pytest.mark.parametrize(
    "raw, problem",
    [
        ("0,x", "'x' is not an integer"),
        ("0,,1", "'' is not an integer"),
        ("1.0,2", "'1.0' is not an integer"),
        ("0,-1", "must be non-negative, got -1"),
        ("1,1", "GPU 1 is listed more than once"),
        ("0", "lists 1 GPU\\(s\\), but the model needs .* 2 x 1 = 2"),
        ("0,1,2", "lists 3 GPU\\(s\\)"),
    ],
)
def test_device_id_errors_name_the_parameter_and_problem(raw: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"GPU_DEVICE_IDS.*{problem}"):
        gpu_device_ids(config(raw), TP2)


def test_kind_model_pins_to_device_ids() -> None:
    assert engine_environment(config("2,3"), TP2, "MODEL", "0") == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert engine_environment(config(), TP2, "MODEL", "0") == {}


def test_kind_gpu_pins_to_tritons_device() -> None:
    assert engine_environment(config(kind="KIND_GPU"), {}, "GPU", "1") == {"CUDA_VISIBLE_DEVICES": "1"}
    assert engine_environment(config(kind="KIND_GPU"), {}, "GPU", "-1") == {}
    with pytest.raises(ValueError, match="model_instance_device_id"):
        engine_environment(config(kind="KIND_GPU"), {}, "GPU", "first")


def test_kind_gpu_multi_gpu_is_rejected_before_placement() -> None:
    with pytest.raises(ValueError, match="KIND_GPU"):
        engine_environment(config(kind="KIND_GPU"), TP2, "KIND_GPU", "0")


def test_device_ids_are_ignored_with_a_warning_outside_kind_model() -> None:
    gpu = config("5,6", kind="KIND_GPU")  # invalid for a one-GPU model, but never used
    assert engine_environment(gpu, {}, "GPU", "0") == {"CUDA_VISIBLE_DEVICES": "0"}
    assert engine_environment(config("5", kind="KIND_CPU"), {}, "CPU", "0") == {}
    assert "KIND_GPU instance ignores it, uses the GPU Triton assigns" in (ignored_device_ids(gpu, "GPU") or "")
    assert "KIND_CPU instance ignores it, uses the CPU" in (ignored_device_ids(config("5"), "KIND_CPU") or "")
    assert ignored_device_ids(config("5"), "MODEL") is None
    assert ignored_device_ids(config(), "GPU") is None


def test_ids_index_the_inherited_visible_devices() -> None:
    env = engine_environment(config("1,0"), TP2, "MODEL", "0", visible="4, GPU-abc ,6")
    assert env == {"CUDA_VISIBLE_DEVICES": "GPU-abc,4"}
    assert engine_environment(config(), {}, "GPU", "2", visible="4,5,6") == {"CUDA_VISIBLE_DEVICES": "6"}
    with pytest.raises(ValueError, match="GPU 2 is not available: CUDA_VISIBLE_DEVICES='4,5' leaves 2 GPU"):
        engine_environment(config("0,2"), TP2, "MODEL", "0", visible="4,5")
    with pytest.raises(ValueError, match="leaves 0 GPU"):
        engine_environment(config(), {}, "GPU", "0", visible="")
