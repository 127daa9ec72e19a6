from __future__ import annotations

from vllm_backend.interface import INPUTS, OUTPUTS, missing_tensors

STOCK_INPUTS = {
    "text_input", "image", "stream", "sampling_parameters", "exclude_input_in_output", "return_finish_reason",
    "return_cumulative_logprob", "return_logprobs", "return_num_input_tokens", "return_num_output_tokens",
}  # fmt: skip
STOCK_OUTPUTS = {"text_output", "finish_reason", "cumulative_logprob", "logprobs", "num_input_tokens", "num_output_tokens"}
OUR_OUTPUTS = {"prompt_logprobs", "token_ids", "token_strs", "max_model_len"}  # the last three: tokenize-only


def test_every_stock_tensor_is_declared() -> None:
    assert STOCK_INPUTS <= {t["name"] for t in INPUTS}
    assert STOCK_OUTPUTS | OUR_OUTPUTS == {t["name"] for t in OUTPUTS}


def test_our_inputs_are_optional() -> None:
    """A drop-in for the stock backend: a client that sends only the stock inputs gets the stock behaviour."""
    assert all(t.get("optional") for t in INPUTS if t["name"] not in STOCK_INPUTS)


def test_auto_complete_keeps_what_the_user_declared() -> None:
    declared = [{"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]}]
    added = missing_tensors(declared, INPUTS)
    assert "text_input" not in {t["name"] for t in added}
    assert len(added) == len(INPUTS) - 1
