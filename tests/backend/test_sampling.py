from __future__ import annotations

import json

import pytest
from vllm.sampling_params import RequestOutputKind

from vllm_backend.sampling import SamplingError, sampling_from_json


def test_strings_convert_to_their_types() -> None:
    raw = json.dumps({"temperature": "0.1", "max_tokens": "100", "ignore_eos": "false", "top_k": "5"})
    params = sampling_from_json(raw, None, stream=False).params
    assert params.temperature == pytest.approx(0.1)
    assert params.max_tokens == 100
    assert params.ignore_eos is False
    assert params.top_k == 5
    assert params.output_kind == RequestOutputKind.FINAL_ONLY


def test_stream_asks_the_engine_for_deltas() -> None:
    assert sampling_from_json("{}", None, stream=True).params.output_kind == RequestOutputKind.DELTA


@pytest.mark.parametrize(
    "raw, field",
    [
        ({"temperatur": 1}, "temperatur"),
        ({"max_tokens": "many"}, "max_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"output_kind": 1}, "output_kind"),
    ],
)
def test_errors_name_the_field(raw: dict, field: str) -> None:
    with pytest.raises(SamplingError, match=field):
        sampling_from_json(json.dumps(raw), None, stream=False)


def test_not_json_is_an_error() -> None:
    with pytest.raises(SamplingError, match="sampling_parameters"):
        sampling_from_json("{", None, stream=False)


def test_request_parameters_are_used_without_the_tensor() -> None:
    params = sampling_from_json(None, json.dumps({"max_tokens": 3, "temperature": 0}), stream=False).params
    assert params.max_tokens == 3 and params.temperature == 0


def test_structured_outputs_and_lora_name_are_taken_apart() -> None:
    raw = json.dumps({"structured_outputs": json.dumps({"choice": ["yes", "no"]}), "lora_name": "a"})
    parsed = sampling_from_json(raw, None, stream=False)
    assert parsed.params.structured_outputs.choice == ["yes", "no"]
    assert parsed.lora_name == "a"


def test_implied_fields_fill_only_what_the_request_leaves_unset_before_vllm_derives_from_them() -> None:
    implied = {"prompt_logprobs": 0}
    params = sampling_from_json("{}", None, stream=False, implied=implied).params
    assert params.prompt_logprobs == 0
    # Set at construction, so vLLM knows to skip the prefix cache (cached prompt tokens would get no logprobs).
    if hasattr(params, "skip_reading_prefix_cache"):
        assert params.skip_reading_prefix_cache is True
    assert sampling_from_json('{"prompt_logprobs": null}', None, False, implied).params.prompt_logprobs == 0
    assert sampling_from_json('{"prompt_logprobs": 3}', None, False, implied).params.prompt_logprobs == 3
    assert sampling_from_json(None, '{"prompt_logprobs": "2"}', False, implied).params.prompt_logprobs == 2
    assert sampling_from_json("{}", None, stream=False).params.prompt_logprobs is None
