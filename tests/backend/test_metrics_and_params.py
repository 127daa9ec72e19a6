from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from vllm_backend.metrics import (
    TIME_PER_OUTPUT_TOKEN,
    FamilySpec,
    MetricsSink,
    family_specs,
    merge_updates,
    one_two_five,
    updates_from_stats,
)
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


def test_the_per_token_histogram_can_be_left_out() -> None:
    iteration = SimpleNamespace(num_generation_tokens=2, inter_token_latencies_iter=[0.01, 0.02])
    assert (TIME_PER_OUTPUT_TOKEN, "observe", 0.02) in updates_from_stats(None, iteration)
    assert updates_from_stats(None, iteration, per_token=False) == [("vllm:generation_tokens_total", "inc", 2)]
    assert TIME_PER_OUTPUT_TOKEN in {spec.name for spec in family_specs(2048)}
    without = {spec.name for spec in family_specs(2048, per_token=False)}
    assert TIME_PER_OUTPUT_TOKEN not in without and "vllm:time_to_first_token_seconds" in without
    assert BackendParams.from_config(_config()).report_time_per_output_token  # the stock backend's families
    assert not BackendParams.from_config(_config(REPORT_TIME_PER_OUTPUT_TOKEN="False")).report_time_per_output_token


def test_merged_updates_sum_increments_keep_the_last_gauge_and_every_observation() -> None:
    steps = [
        [("c", "inc", 2), ("g", "set", 1), ("h", "observe", 0.1)],
        [("c", "inc", 3), ("g", "set", 4), ("h", "observe", 0.2), ("h", "observe", 0.3)],
    ]
    assert merge_updates(steps) == [("c", "inc", 5), ("g", "set", 4), *[("h", "observe", v) for v in (0.1, 0.2, 0.3)]]


class _Recorded:
    """A Triton metric that records the calls made on it."""

    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name = calls, name

    def __getattr__(self, operation: str):
        return lambda value: self.calls.append((self.name, operation, value))


def test_the_sink_applies_what_arrives_together_as_one_batch_and_skips_unchanged_gauges() -> None:
    calls: list = []
    specs = [FamilySpec(name, kind, "") for name, kind in (("c", "counter"), ("g", "gauge"), ("h", "histogram"))]
    sink = MetricsSink(lambda spec: _Recorded(calls, spec.name), specs, coalesce_s=30.0)
    for step in range(3):  # engine steps within one gathering window
        sink.submit([("c", "inc", 1), ("g", "set", 7), ("h", "observe", step)])
    sink.close()  # ends the window: what was gathered is applied, then the thread stops
    assert calls == [("c", "increment", 3), ("g", "set", 7), *[("h", "observe", step) for step in range(3)]]

    calls.clear()
    sink = MetricsSink(lambda spec: _Recorded(calls, spec.name), specs, coalesce_s=0.0)
    for value in (7, 7, 8):
        sink.submit([("g", "set", value)])
    sink.close()
    assert calls == [("g", "set", 7), ("g", "set", 8)]


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


def test_stream_pacing_is_off_unless_configured() -> None:
    """Shipped configs (model_repository/, compose, Helm) merge only when behind; the local CPU stack sets a cap."""
    assert BackendParams.from_config(_config()).stream_responses_per_s == 0
    shipped = (Path(__file__).parents[2] / "model_repository").glob("*/config.pbtxt")
    assert all("STREAM_RESPONSES_PER_S" not in path.read_text() for path in shipped)


def test_the_local_stack_caps_streamed_responses(tmp_path: Path) -> None:
    from localstack.model_repo import CPU_STREAM_RESPONSES_PER_S, write_model_repository

    write_model_repository(tmp_path, tmp_path / "weights", name="m")
    config = (tmp_path / "m" / "config.pbtxt").read_text()
    assert f'key: "STREAM_RESPONSES_PER_S" value: {{ string_value: "{CPU_STREAM_RESPONSES_PER_S}" }}' in config
    assert 'backend: "vllm"' in config


def test_stream_pacing_parameters() -> None:
    params = BackendParams.from_config(_config(STREAM_RESPONSES_PER_S="500", STREAM_PACE_ABOVE="8"))
    assert (params.stream_responses_per_s, params.stream_pace_above) == (500.0, 8)
    assert BackendParams.from_config(_config(STREAM_RESPONSES_PER_S="0")).stream_responses_per_s == 0  # off
    with pytest.raises(ValueError, match="STREAM_RESPONSES_PER_S"):
        BackendParams.from_config(_config(STREAM_RESPONSES_PER_S="-1"))


def test_response_sender_threads_parameter() -> None:
    assert BackendParams.from_config(_config()).response_sender_threads == 1
    assert BackendParams.from_config(_config(RESPONSE_SENDER_THREADS="4")).response_sender_threads == 4
    with pytest.raises(ValueError, match="RESPONSE_SENDER_THREADS"):
        BackendParams.from_config(_config(RESPONSE_SENDER_THREADS="0"))
