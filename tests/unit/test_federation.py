from __future__ import annotations

from gateway.observability.federation import FetchResult, parse_families, render, status_text, unhealthy_engines

TRITON_TEXT = """\
# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{model="m",version="1"} 3
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 0.25
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_count{model="m",version="1"} 2
vllm:time_to_first_token_seconds_sum{model="m",version="1"} 0.5
vllm:time_to_first_token_seconds_bucket{model="m",version="1",le="0.001"} 0
vllm:time_to_first_token_seconds_bucket{model="m",version="1",le="+Inf"} 2
# HELP vllm:engine_healthy 1 while the vLLM engine passes its health checks.
# TYPE vllm:engine_healthy gauge
vllm:engine_healthy{model="m",version="1"} 1
vllm:engine_healthy{model="dead",version="1"} 0
"""


def test_only_vllm_and_nv_inference_families_are_kept_with_names_intact() -> None:
    text = render([parse_families(TRITON_TEXT, "t1")])
    assert "nv_cpu_utilization" not in text
    assert "# TYPE nv_inference_count counter\n" in text
    assert 'nv_inference_count{upstream="t1",model="m",version="1"} 3\n' in text
    assert 'vllm:time_to_first_token_seconds_bucket{upstream="t1",model="m",version="1",le="+Inf"} 2\n' in text
    assert "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.\n" in text


def test_several_upstreams_share_one_family_block() -> None:
    text = render([parse_families(TRITON_TEXT, "a"), parse_families(TRITON_TEXT, "b")])
    assert text.count("# TYPE nv_inference_count counter") == 1
    assert 'nv_inference_count{upstream="a",' in text and 'nv_inference_count{upstream="b",' in text


def test_samples_without_labels_get_the_upstream_label() -> None:
    families = parse_families("# TYPE vllm:x gauge\nvllm:x 1\nvllm:y{} 2\n", "u")
    assert render([families]) == '# TYPE vllm:x gauge\nvllm:x{upstream="u"} 1\nvllm:y{upstream="u"} 2\n'


def test_status_gauges() -> None:
    text = status_text([FetchResult("u1", True, 0.01), FetchResult("u2", False, 1.0)])
    assert 'gateway_federation_up{upstream="u1"} 1\n' in text
    assert 'gateway_federation_up{upstream="u2"} 0\n' in text
    assert 'gateway_federation_duration_seconds{upstream="u2"} 1.000000' in text


def test_unhealthy_engines_from_the_health_gauge() -> None:
    assert unhealthy_engines(parse_families(TRITON_TEXT, "u")) == {"dead"}
