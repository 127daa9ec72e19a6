"""Part 3's pure pieces: the CPU split by stage, the stage ceilings, the A/C ratios and the targets."""

from __future__ import annotations

import pytest

from bench.gpu_report import path_ceiling, ratio_rows, stage_ceilings, targets
from bench.gpu_rates import split_by_stage, tokens_per_chunk
from bench.proc_stats import process_kind


def _run(system: str, c: int, tok_s: float, itl_p99: float = 10.0, backend: str = "openai", round_: int = 0,
         cpu: dict | None = None) -> dict:  # fmt: skip
    return {"system": system, "backend": backend, "max_concurrency": c, "round": round_, "output_throughput": tok_s,
            "p50_ttft_ms": 20.0, "p50_itl_ms": 2.0, "p99_itl_ms": itl_p99, "cpu": cpu or {}}  # fmt: skip


def test_processes_are_sorted_into_stages_by_name() -> None:
    assert process_kind("VLLM::EngineCore", "triton") == "engine"
    assert process_kind("triton_python_backend_stub", "triton") == "stub"
    assert process_kind("triton_python_b", "triton") == "stub"  # the name Linux cuts at 15 characters
    assert process_kind("tritonserver", "triton") == "triton"
    assert process_kind("python", "gateway") == "gateway"  # a uvicorn worker under the gateway's supervisor


def test_a_stage_of_several_processes_is_limited_by_its_busiest() -> None:
    before = {1: ("gateway", 10.0), 2: ("gateway", 0.0), 3: ("gateway", 0.0), 4: ("stub", 5.0)}
    after = {1: ("gateway", 10.001), 2: ("gateway", 1.0), 3: ("gateway", 3.0), 4: ("stub", 7.0)}
    stages = split_by_stage(before, after, tokens=100_000)
    assert stages["gateway"]["us_per_token"] == pytest.approx(40.01)
    assert stages["gateway"]["busiest_us_per_token"] == pytest.approx(30.0)
    assert stages["gateway"]["processes"] == 2  # the idle supervisor does not count
    run = {"system": "A", "cpu": {**stages, "engine": {"busiest_us_per_token": 1.0}}}
    ceilings = stage_ceilings(run)
    assert ceilings == pytest.approx({"gateway": 1e6 / 30.0, "stub": 1e6 / 20.0})  # the engine is not a stage
    assert path_ceiling(ceilings) == ("gateway", pytest.approx(1e6 / 30.0))
    assert path_ceiling({}) is None


def test_tokens_per_chunk_counts_each_requests_first_chunk_and_skips_failures() -> None:
    detailed = {"output_lens": [8, 6, 0], "itls": [[0.1, 0.1, 0.1], [0.1, 0.1], []]}
    assert tokens_per_chunk(detailed) == pytest.approx(14 / 7)
    assert tokens_per_chunk({"total_output_tokens": 300, "chunks": 100}) == pytest.approx(3.0)
    assert tokens_per_chunk({"completed": 0}) is None


def test_ratios_pair_each_round_and_targets_read_the_high_levels() -> None:
    api = {"api server": {"busiest_us_per_token": 50.0}}
    path = {"gateway": {"busiest_us_per_token": 20.0}, "triton": {"busiest_us_per_token": 25.0},
            "stub": {"busiest_us_per_token": 40.0}}  # fmt: skip
    runs = [
        _run("A", 256, 900.0, 12.0, cpu=path), _run("C", 256, 1000.0, 10.0, cpu=api),
        _run("A", 256, 1100.0, 12.0, round_=1, cpu=path), _run("C", 256, 1000.0, 10.0, round_=1, cpu=api),
        _run("C'", 256, 1000.0), _run("A", 1, 50.0), _run("C", 1, 50.0),
    ]  # fmt: skip
    rows = ratio_rows(runs, {"output_throughput": 2000.0})
    row = next(r for r in rows if r["concurrency"] == 256 and r["endpoint"] == "completions")
    assert row["A/C tok/s"] == pytest.approx(1.0)  # the median of 0.9 and 1.1
    assert row["A/C' tok/s"] == pytest.approx(0.9)  # C' ran round 0 only
    assert row["A/C ITL p99"] == pytest.approx(1.2)
    assert row["A/E tok/s"] == pytest.approx(0.5)
    assert row["A path ceiling"] == pytest.approx(25_000.0)
    assert row["C API server ceiling"] == pytest.approx(20_000.0)
    assert row["A busiest stage/C API server µs"] == pytest.approx(0.8)
    found = {t["target"]: t["pass"] for t in targets(rows)}
    assert found["A tok/s >= 1.0x C (completions, c=256)"] is True
    assert found["A tok/s >= 0.9x C' (completions, c=256)"] is True
    assert found["A ITL p99 <= 1.2x C (completions, c=256)"] is True
    assert found["A's every stage µs/token <= C's API server (completions, c=256)"] is True
    assert found["A path ceiling >= 30,000 tok/s (completions, c=256)"] is False
    assert found["A TTFT p50 <= 1.1x C (completions, c=1)"] is True
    assert not any("chat" in name for name in found)  # no chat runs, no chat targets
