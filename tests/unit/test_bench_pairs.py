from __future__ import annotations

import random

from bench.ttft_pairs import both_orders_interval


def test_interval_holds_the_true_difference_and_narrows_with_less_noise() -> None:
    rng = random.Random(1)
    noisy = [3.0 + rng.gauss(0, 14) for _ in range(400)]
    quiet = [3.0 + rng.gauss(0, 2) for _ in range(400)]
    low, high = both_orders_interval(noisy)
    assert low < 3.0 < high
    q_low, q_high = both_orders_interval(quiet)
    assert q_low < 3.0 < q_high
    assert q_high - q_low < (high - low) / 3
    assert both_orders_interval(noisy) == (low, high)  # seeded: the report does not move between readings


def test_cpu_table_lists_each_role_per_token() -> None:
    from bench.report import _cpu_table

    runs = [
        {"system": "A", "backend": "openai", "max_concurrency": 64,
         "cpu_us_per_token": {"gateway": 140.0, "triton": 330.0, "engine": 2500.0}},
        {"system": "C", "backend": "openai", "max_concurrency": 64,
         "cpu_us_per_token": {"vllm serve": 260.0, "engine": 2400.0}},
        {"system": "A", "backend": "http-nonstream", "max_concurrency": 64},
    ]  # fmt: skip
    lines = _cpu_table(runs).splitlines()
    rows = [line for line in lines if line.startswith("| A") or line.startswith("| C")]
    assert len(rows) == 2
    assert rows[0].split(" | ")[3:7] == ["0", "140.00", "330.00", "–"]
    assert "2,400.00" in rows[1]


def test_a_over_c_is_the_median_of_the_rounds_ratios() -> None:
    from bench.report import ac_rounds, serving_ratios

    def run(system: str, round_: int, tok_s: float, ttft: float) -> dict:
        return {"system": system, "backend": "openai", "max_concurrency": 64, "round": round_,
                "output_throughput": tok_s, "p50_ttft_ms": ttft}  # fmt: skip

    runs = [
        run("A", 0, 300.0, 2000.0), run("C", 0, 400.0, 2000.0),  # a slow moment for both would cancel out
        run("C", 1, 300.0, 2500.0), run("A", 1, 330.0, 2400.0),
        run("A", 2, 350.0, 2200.0), run("C", 2, 350.0, 2000.0),
        run("A", 3, 999.0, 1.0),  # no C to pair with: left out
    ]  # fmt: skip
    rounds = ac_rounds(runs)
    assert [(r["round"], r["A/C tok/s"]) for r in rounds] == [(0, 0.75), (1, 1.1), (2, 1.0)]
    row = next(r for r in serving_ratios(runs) if r["concurrency"] == 64)
    assert row["A/C tok/s completions"] == 1.0
    assert row["A/C TTFT p50 completions"] == 1.0  # median of 1.0, 0.96, 1.1
    assert row["A/C tok/s chat"] is None


def test_gateway_over_floor_is_the_median_of_the_rounds_ratios() -> None:
    from bench.gateway_cost import median_run
    from bench.report import cost_figures, markdown

    def run(cpu_s_per_chunk: float) -> dict:
        chunks = 10_000
        return {"chunks": chunks, "chunks_per_s": 1_000.0, "chunks_per_cpu_s": 1 / cpu_s_per_chunk,
                "cpu_us_per_chunk": cpu_s_per_chunk * 1e6, "server_cpu_s": chunks * cpu_s_per_chunk,
                "max_concurrency": 64, "completed": 40, "p50_ttft_ms": 1.0, "p50_e2el_ms": 5.0,
                "rss_start_mb": 80.0, "rss_peak_mb": 110.0, "peak_in_flight": 256}  # fmt: skip

    rounds = [
        {"round": 1, "gateway": run(100e-6), "floor": run(10e-6)},  # 0.1
        {"round": 2, "gateway": run(150e-6), "floor": run(15e-6)},  # 0.1: a slow moment for both
        {"round": 3, "gateway": run(100e-6), "floor": run(20e-6)},  # 0.2
    ]
    gateways = [r["gateway"] for r in rounds]
    cost = {"rounds": rounds, "gateway": median_run(gateways, "chunks_per_cpu_s"),
            "floor": median_run([r["floor"] for r in rounds], "chunks_per_cpu_s"), "triton_direct": run(50e-6),
            "latency_c1": {"gateway": run(1e-4), "floor": run(1e-5), "triton_direct": run(5e-5)},
            "rss": run(1e-4)}  # fmt: skip
    figures = cost_figures(cost)
    assert round(figures["gateway/floor chunks per CPU-s"], 6) == 0.1
    assert round(figures["gateway CPU us per chunk"]) == 100  # the median round's gateway
    assert cost["floor"]["cpu_us_per_chunk"] == 15.0
    text = markdown({"started": "now", "command": "bench", "gateway_cost": cost, "targets": []})
    assert "| 3 | 100.00 | 20.00 | 0.20 |" in text


def test_part2_splits_the_gateway_cost_at_its_grpc_client() -> None:
    from bench.report import cost_figures

    def round_(number: int, gateway_us: float, floor_us: float, grpc_us: float) -> dict:
        return {
            "round": number,
            "gateway": {"cpu_us_per_chunk": gateway_us, "chunks_per_cpu_s": 1e6 / gateway_us, "chunks_per_s": 1.0},
            "floor": {"cpu_us_per_chunk": floor_us, "chunks_per_cpu_s": 1e6 / floor_us, "chunks_per_s": 1.0},
            "grpc_read": {"cpu_us_per_message": grpc_us},
        }

    rounds = [round_(1, 70.0, 7.0, 50.0), round_(2, 80.0, 8.0, 40.0), round_(3, 90.0, 6.0, 60.0)]
    run = {"max_concurrency": 64, "cpu_us_per_chunk": 80.0, "chunks_per_cpu_s": 12500.0, "p50_e2el_ms": 9.0,
           "p50_ttft_ms": 1.0}  # fmt: skip
    cost = {
        "rounds": rounds, "gateway": run, "floor": run, "triton_direct": run,
        "latency_c1": {"gateway": run, "triton_direct": run},
        "rss": {"rss_start_mb": 100.0, "rss_peak_mb": 110.0, "peak_in_flight": 256},
    }  # fmt: skip
    figures = cost_figures(cost)
    assert figures["gRPC client alone CPU us per message"] == 50.0
    assert figures["gateway CPU us per chunk beyond its gRPC client"] == 30.0  # of 20, 40, 30
    assert abs(figures["gateway/floor ceiling set by the gRPC client"] - 0.14) < 1e-9  # of 0.14, 0.2, 0.1
    assert abs(figures["gateway/floor chunks per CPU-s"] - 0.1) < 1e-9

    for r in rounds:
        del r["grpc_read"]  # results written before the gRPC half was measured
    assert "gRPC client alone CPU us per message" not in cost_figures(cost)


def test_a_missed_target_never_reads_as_its_limit() -> None:
    from bench.report import _target

    missed = _target("A tok/s >= 1.0x C", 0.99957, 1.0, True, ".3f")
    assert missed == {"target": "A tok/s >= 1.0x C", "value": "0.99957", "pass": False}
    assert _target("A tok/s >= 1.0x C", 1.0004, 1.0, True, ".3f")["value"] == "1.000"
    assert _target("RSS <= 300 MB", 300.04, 300.0, False, ".1f")["value"] == "300.04"
