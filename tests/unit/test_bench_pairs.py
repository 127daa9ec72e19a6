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
