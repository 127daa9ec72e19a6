from __future__ import annotations

from types import SimpleNamespace

import pytest

from vllm_backend.metrics import family_specs, one_two_five, updates_from_stats
from vllm_backend.params import BackendParams


def test_one_two_five_buckets() -> None:
    assert one_two_five(2048) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]


def test_stock_families_and_our_gauges() -> None:
    names = [spec.name for spec in family_specs(2048)]
    assert names[:8] == [
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds",
        "vllm:time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
        "vllm:request_params_n",
    ]
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} <= set(names)


def test_updates_from_stats() -> None:
    iteration = SimpleNamespace(
        num_prompt_tokens=7,
        num_generation_tokens=3,
        time_to_first_tokens_iter=[0.02],
        inter_token_latencies_iter=[0.01, 0.03],
        n_params_iter=[1],
        finished_requests=[SimpleNamespace(e2e_latency=1.5, num_prompt_tokens=7, num_generation_tokens=4)],
    )
    prefix = SimpleNamespace(queries=128, hits=96)
    scheduler = SimpleNamespace(num_running_reqs=2, num_waiting_reqs=1, kv_cache_usage=0.25, prefix_cache_stats=prefix)
    updates = updates_from_stats(scheduler, iteration)
    assert ("vllm:prefix_cache_queries_total", "inc", 128) in updates
    assert ("vllm:prefix_cache_hits_total", "inc", 96) in updates
    assert ("vllm:prompt_tokens_total", "inc", 7) in updates
    assert ("vllm:generation_tokens_total", "inc", 3) in updates
    assert ("vllm:time_per_output_token_seconds", "observe", 0.03) in updates
    assert ("vllm:request_generation_tokens", "observe", 4) in updates
    assert ("vllm:num_requests_running", "set", 2) in updates
    assert ("vllm:kv_cache_usage_perc", "set", 0.25) in updates


def _config(**params: str) -> dict:
    return {"parameters": {k: {"string_value": v} for k, v in params.items()}}


def test_params_are_case_insensitive_flags() -> None:
    params = BackendParams.from_config(_config(REPORT_CUSTOM_METRICS="True", ENABLE_VLLM_HEALTH_CHECK="false"))
    assert params.report_custom_metrics and not params.health_check
    assert BackendParams.from_config({}) == BackendParams()


def test_bad_numeric_param_names_itself() -> None:
    with pytest.raises(ValueError, match="VLLM_HEALTH_CHECK_INTERVAL_S"):
        BackendParams.from_config(_config(VLLM_HEALTH_CHECK_INTERVAL_S="soon"))


def test_cancel_check_interval() -> None:
    assert BackendParams().cancel_check_interval_s == 0.5
    assert BackendParams.from_config(_config(CANCEL_CHECK_INTERVAL_S="0.1")).cancel_check_interval_s == 0.1
    with pytest.raises(ValueError, match="CANCEL_CHECK_INTERVAL_S"):
        BackendParams.from_config(_config(CANCEL_CHECK_INTERVAL_S="0"))


def test_stream_pacing_parameters() -> None:
    params = BackendParams.from_config(_config(STREAM_RESPONSES_PER_S="500", STREAM_PACE_ABOVE="8"))
    assert (params.stream_responses_per_s, params.stream_pace_above) == (500.0, 8)
    assert BackendParams.from_config(_config(STREAM_RESPONSES_PER_S="0")).stream_responses_per_s == 0  # off
    with pytest.raises(ValueError, match="STREAM_RESPONSES_PER_S"):
        BackendParams.from_config(_config(STREAM_RESPONSES_PER_S="-1"))
