"""Part 5's pure pieces: the dummy shapes and the report's ratios and targets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.gpu_host.report import Run, markdown, run_from_serve, run_from_throughput, targets
from bench.gpu_host.shapes import llama_config, vocab_size, write_dummy_model


def _tokenizer(folder: Path, vocab: int, added: int) -> Path:
    folder.mkdir()
    spec = {"model": {"vocab": {f"t{i}": i for i in range(vocab)}}, "added_tokens": [{"id": added, "content": "x"}]}
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


def test_the_dummy_model_has_the_shape_and_the_tokenizers_vocabulary(tmp_path: Path) -> None:
    tokenizer = _tokenizer(tmp_path / "tok", vocab=100, added=120)
    assert vocab_size(tokenizer) == 121  # added tokens count
    model = write_dummy_model("8b", tokenizer, tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (4096, 32, 121)
    assert (model / "tokenizer.json").is_file() and (model / "tokenizer_config.json").is_file()
    with pytest.raises(ValueError, match="unknown shape"):
        llama_config("70b", 10)


def test_figures_come_from_the_benchmarks_files() -> None:
    serve = {"output_throughput": 1000.0, "median_ttft_ms": 20.0, "median_itl_ms": 6.0, "p99_itl_ms": 9.0,
             "completed": 16, "failed": 0}  # fmt: skip
    assert run_from_serve("8b", "A", 1, serve) == Run("8b", "A", 1, 1000.0, 20.0, 6.0, 9.0, 16, 0)
    engine = run_from_throughput("8b", 512, {"num_requests": 1024, "elapsed_time": 16.0}, output_len=256)
    assert engine.output_tok_s == 1024 * 256 / 16.0


def _runs(a_tok_s: float, a_itl_p99: float) -> list[Run]:
    runs = []
    for c in (1, 64, 256, 512):
        runs.append(Run("8b", "C", c, 10_000.0, 100.0, 10.0, 20.0, 2 * c, 0))
        runs.append(Run("8b", "A", c, a_tok_s, 90.0, 11.0, a_itl_p99, 2 * c, 0))
    return runs


def _met(runs: list[Run]) -> dict[str, bool | None]:
    return {check.target: check.met for check in targets(runs)}


def test_targets_hold_or_fail_on_the_ratios() -> None:
    good = _met(_runs(a_tok_s=12_000.0, a_itl_p99=50.0))
    assert good["A/C out tok/s at 64 ≥ 1.0"] and good["A/C out tok/s at 512 ≥ 1.15"]
    assert good["ITL p99 at 256 ≤ 3x C's"] and good["TTFT p50 at 256 ≤ C's"]
    assert good["ITL p50 at 1 ≤ 1.02x C's"] is False  # 11 against 10
    assert good["A/E out tok/s at 512 ≥ 0.9"] is None  # E not run
    bad = _met(_runs(a_tok_s=11_000.0, a_itl_p99=70.0))
    assert bad["A/C out tok/s at 512 ≥ 1.15"] is False and bad["ITL p99 at 256 ≤ 3x C's"] is False


def test_a_failed_request_fails_its_target_and_the_report_says_not_run() -> None:
    runs = [*_runs(12_000.0, 50.0), Run("8b", "C'", 512, 11_000.0, failed=2)]
    assert _met(runs)["failed requests = 0"] is False
    text = markdown(runs, "NVIDIA H100 80GB HBM3, 79 GiB", "python -m bench --part5")
    assert "NVIDIA H100" in text and "| 8b | 512 | C' | 11,000 | 1.09 |" in text and "not run" in text
