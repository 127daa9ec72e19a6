"""What `make up MODEL=...` / `MODEL_REPOSITORY=...` serves, resolved without starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from localstack.model_choice import FAST_MODEL_MEMORY_SHARE, repository_models, resolve_model
from localstack.model_repo import ENGINE_MEMORY_SHARE, write_model_repository
from localstack.paths import DEFAULT_MODEL_NAME, FAST_MODEL_NAME, CachePaths
from localstack.stack import LocalStack
from localstack.stack_config import StackConfig
from localstack.up import _parse, stack_config


@pytest.fixture
def cache(tmp_path: Path) -> CachePaths:
    return CachePaths(tmp_path / "cache")


def _hf_folder(parent: Path, name: str) -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_prepared_models_by_name(cache: CachePaths) -> None:
    default = resolve_model(DEFAULT_MODEL_NAME, cache)
    assert (default.folder, default.memory_share) == (cache.default_model_dir, ENGINE_MEMORY_SHARE)
    fast = resolve_model(FAST_MODEL_NAME, cache)
    assert (fast.name, fast.folder, fast.memory_share) == (FAST_MODEL_NAME, cache.fast_model_dir, 0.05)
    assert FAST_MODEL_MEMORY_SHARE < ENGINE_MEMORY_SHARE


def test_a_folder_is_served_under_its_name_lowercased(cache: CachePaths, tmp_path: Path) -> None:
    folder = _hf_folder(tmp_path, "Qwen3-0.6B")
    served = resolve_model(str(folder), cache)
    assert (served.name, served.folder, served.memory_share) == ("qwen3-0.6b", folder, ENGINE_MEMORY_SHARE)


def test_a_copy_of_the_fast_model_keeps_its_small_share(cache: CachePaths, tmp_path: Path) -> None:
    assert resolve_model(str(_hf_folder(tmp_path, "Tiny-Random-Llama")), cache).memory_share == FAST_MODEL_MEMORY_SHARE


def test_placement_is_kept_for_compute_bound_engines_only(cache: CachePaths, tmp_path: Path) -> None:
    assert not StackConfig.serving(resolve_model(FAST_MODEL_NAME, cache), run_dir=tmp_path).keep_off_engine_cores
    assert StackConfig.serving(resolve_model(DEFAULT_MODEL_NAME, cache), run_dir=tmp_path).keep_off_engine_cores
    forced = StackConfig.serving(resolve_model(DEFAULT_MODEL_NAME, cache), run_dir=tmp_path, keep_off_engine_cores=False)
    assert not forced.keep_off_engine_cores


@pytest.mark.parametrize("choice", ["no-such-model", "/nonexistent/folder"])
def test_unknown_choices_name_the_options(cache: CachePaths, choice: str) -> None:
    with pytest.raises(ValueError, match=FAST_MODEL_NAME):
        resolve_model(choice, cache)


def test_repository_models_are_its_folders_with_a_config(tmp_path: Path) -> None:
    write_model_repository(tmp_path, tmp_path / "weights", "b-model")
    write_model_repository(tmp_path, tmp_path / "weights", "a-model")
    (tmp_path / "notes").mkdir()
    assert repository_models(tmp_path) == ["a-model", "b-model"]
    with pytest.raises(ValueError, match="no model folder"):
        repository_models(tmp_path / "notes")
    with pytest.raises(ValueError, match="not a folder"):
        repository_models(tmp_path / "missing")


def test_up_with_nothing_chosen_serves_the_default_as_before(
    cache: CachePaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("MODEL", "MODEL_REPOSITORY"):
        monkeypatch.setenv(variable, "")  # what the Makefile passes when none is given
    config = stack_config(_parse([]), cache)
    assert (config.model_name, config.model_dir, config.model_repository) == (DEFAULT_MODEL_NAME, None, None)
    assert (config.engine_memory_share, config.http_port, config.gateway_port) == (ENGINE_MEMORY_SHARE, 8000, 9000)


def test_up_serves_the_model_from_the_environment(cache: CachePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL", FAST_MODEL_NAME)
    config = stack_config(_parse(["--grpc-port", "18001"]), cache)
    assert (config.model_name, config.model_dir) == (FAST_MODEL_NAME, cache.fast_model_dir)
    assert (config.engine_memory_share, config.grpc_port) == (FAST_MODEL_MEMORY_SHARE, 18001)


def test_up_serves_a_whole_repository(cache: CachePaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repository = write_model_repository(tmp_path / "repo", tmp_path, "z-model")
    write_model_repository(repository, tmp_path, "m-model")
    monkeypatch.setenv("MODEL_REPOSITORY", str(repository))
    config = stack_config(_parse([]), cache)
    assert (config.model_repository, config.model_name) == (repository, "m-model")
    assert LocalStack(config).served_models() == ["m-model", "z-model"]


def test_up_refuses_both_choices(cache: CachePaths, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        stack_config(_parse(["--model", FAST_MODEL_NAME, "--model-repository", str(tmp_path)]), cache)


def test_a_config_serving_a_model_takes_its_share(cache: CachePaths, tmp_path: Path) -> None:
    config = StackConfig.serving(resolve_model(FAST_MODEL_NAME, cache), run_dir=tmp_path)
    assert LocalStack(config).served_models() == [FAST_MODEL_NAME]
    assert config.engine_memory_share == FAST_MODEL_MEMORY_SHARE
