from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm.lora.request import LoRARequest

from vllm_backend.lora import (
    LoraError,
    load_multi_lora,
    lora_enabled,
    lora_table,
    parse_multi_lora,
    resolve_lora,
)


def adapter(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))
    return folder


@pytest.fixture
def version_dir(tmp_path: Path) -> Path:
    version = tmp_path / "model" / "1"
    version.mkdir(parents=True)
    alpha = adapter(tmp_path / "adapters" / "alpha")
    adapter(version / "beta")
    (version / "multi_lora.json").write_text(json.dumps({"alpha": str(alpha), "beta": "beta"}))
    return version


@pytest.mark.parametrize(
    "value, enabled", [(True, True), ("true", True), ("TRUE", True), (False, False), ("yes", False), (None, False)]
)
def test_lora_enabled(value: object, enabled: bool) -> None:
    args = {} if value is None else {"enable_lora": value}
    assert lora_enabled(args) is enabled


def test_table_gives_stable_ids_in_file_order(version_dir: Path) -> None:
    table = lora_table({"enable_lora": True}, str(version_dir))
    assert table is not None
    assert list(table) == ["alpha", "beta"]
    beta = resolve_lora("beta", table)
    assert isinstance(beta, LoRARequest)
    assert (beta.lora_name, beta.lora_int_id) == ("beta", 2)
    assert beta.lora_path == str(version_dir / "beta")  # relative to the version folder
    alpha = resolve_lora("alpha", table)
    assert alpha is not None and alpha.lora_int_id == 1
    assert alpha.lora_path == str(version_dir.parent.parent / "adapters" / "alpha")
    assert resolve_lora("beta", table).lora_int_id == 2


def test_no_lora_name_means_the_base_model(version_dir: Path) -> None:
    assert resolve_lora(None, None) is None
    assert resolve_lora(None, lora_table({"enable_lora": "true"}, str(version_dir))) is None


def test_stock_error_when_lora_is_off(version_dir: Path) -> None:
    table = lora_table({"enable_lora": False}, str(version_dir))
    assert table is None
    with pytest.raises(LoraError) as info:
        resolve_lora("alpha", table)
    assert str(info.value) == "LoRA feature is not enabled."


def test_stock_error_for_an_unknown_name(version_dir: Path) -> None:
    table = lora_table({"enable_lora": True}, str(version_dir))
    with pytest.raises(LoraError) as info:
        resolve_lora("gamma", table)
    assert str(info.value) == "LoRA gamma is not supported, we currently support ['alpha', 'beta']"


def test_missing_multi_lora_json(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"enable_lora.*multi_lora\.json does not exist"):
        lora_table({"enable_lora": True}, str(tmp_path))
    assert lora_table({}, str(tmp_path)) is None  # the file is only needed when LoRA is on


def test_invalid_json(tmp_path: Path) -> None:
    (tmp_path / "multi_lora.json").write_text("{'alpha': '/x'}")
    with pytest.raises(ValueError, match="is not valid JSON"):
        load_multi_lora(str(tmp_path))


def test_duplicate_names(tmp_path: Path) -> None:
    adapter(tmp_path / "a")
    (tmp_path / "multi_lora.json").write_text('{"alpha": "a", "alpha": "a"}')
    with pytest.raises(ValueError, match="'alpha' is listed more than once"):
        load_multi_lora(str(tmp_path))


@pytest.mark.parametrize(
    "content, problem",
    [
        (["alpha"], "must be a JSON object .* got list"),
        ({"": "a"}, "adapter names must be non-empty strings, got ''"),
        ({"  ": "a"}, "adapter names must be non-empty strings"),
        ({"alpha": 3}, "adapter 'alpha' needs a local folder path, got 3"),
        ({"alpha": ""}, "adapter 'alpha' needs a local folder path"),
        ({"alpha": "missing"}, "adapter 'alpha': folder .*missing does not exist"),
        ({"alpha": "empty"}, "adapter 'alpha': .*empty has no adapter_config.json"),
    ],
)
def test_content_errors(tmp_path: Path, content: object, problem: str) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=problem):
        parse_multi_lora(content, str(tmp_path))
