"""The local stack on a CUDA host (scripts/gpu_e2e.sh): the device's engine arguments, no CPU placement, and
Triton's files from wherever the host put them; checked without starting anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localstack import device as device_module
from localstack.device import DEVICE_VAR, ENGINE_ARGS_VAR, engine_device
from localstack.model_repo import CPU_PARAMETERS, cpu_engine_args, write_model_repository
from localstack.paths import TRITON_HOME_VAR, CachePaths
from localstack.stack_config import StackConfig


@pytest.fixture(autouse=True)
def _no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (DEVICE_VAR, ENGINE_ARGS_VAR, TRITON_HOME_VAR):
        monkeypatch.delenv(name, raising=False)


def _written(repository: Path, name: str) -> tuple[dict, str]:
    engine = json.loads((repository / name / "1" / "model.json").read_text())
    return engine, (repository / name / "config.pbtxt").read_text()


def test_the_device_is_the_setting_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVICE_VAR, "CUDA")
    assert engine_device() == "cuda"
    monkeypatch.setenv(DEVICE_VAR, "gpu")
    with pytest.raises(ValueError, match="cpu, cuda"):
        engine_device()


def test_unset_it_takes_both_an_nvidia_device_and_a_cuda_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    node = tmp_path / "nvidiactl"
    monkeypatch.setattr(device_module, "NVIDIA_DEVICE_FILES", (node,))
    monkeypatch.setattr(device_module, "_torch_has_cuda", lambda: True)
    assert engine_device() == "cpu"
    node.touch()
    assert engine_device() == "cuda"
    monkeypatch.setattr(device_module, "_torch_has_cuda", lambda: False)
    assert engine_device() == "cpu"


def test_a_cuda_engine_runs_eagerly_without_the_cpu_tuning(tmp_path: Path) -> None:
    write_model_repository(tmp_path, tmp_path / "weights", "m", 0.05, "cuda")
    engine, config = _written(tmp_path, "m")
    assert engine == {**cpu_engine_args(tmp_path / "weights", 0.05), "enforce_eager": True}
    assert CPU_PARAMETERS not in config and 'backend: "vllm"' in config
    write_model_repository(tmp_path, tmp_path / "weights", "c", 0.05, "cpu")
    engine, config = _written(tmp_path, "c")
    assert engine == cpu_engine_args(tmp_path / "weights", 0.05) and config.endswith(CPU_PARAMETERS)


def test_engine_arguments_can_be_overridden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENGINE_ARGS_VAR, '{"enforce_eager": false, "max_num_seqs": 8}')
    write_model_repository(tmp_path, tmp_path / "weights", "m", device="cuda")
    engine, _ = _written(tmp_path, "m")
    assert engine["enforce_eager"] is False and engine["max_num_seqs"] == 8 and engine["max_model_len"] == 2048
    monkeypatch.setenv(ENGINE_ARGS_VAR, "[1]")
    with pytest.raises(ValueError, match="JSON object"):
        write_model_repository(tmp_path, tmp_path / "weights", "m", device="cuda")


def test_a_cuda_stack_places_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DEVICE_VAR, "cuda")
    assert not StackConfig(run_dir=tmp_path, keep_off_engine_cores=True).keep_off_engine_cores
    monkeypatch.setenv(DEVICE_VAR, "cpu")
    assert StackConfig(run_dir=tmp_path).keep_off_engine_cores


def test_triton_home_can_be_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cache = CachePaths(tmp_path / "cache")
    assert cache.triton_home.parent == cache.root
    monkeypatch.setenv(TRITON_HOME_VAR, "/tmp/triton")
    assert cache.triton_bin == Path("/tmp/triton/bin/tritonserver")
    assert cache.triton_python_backend == Path("/tmp/triton/backends/python")
