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
    assert rows[0].split(" | ")[3:6] == ["140.00", "330.00", "–"]
    assert "2,400.00" in rows[1]
