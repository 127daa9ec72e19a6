"""Tokenize-only answers and the token-id check shared with generation."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_backend import compat
from vllm_backend.interface import INPUTS, OUTPUTS, TOKENIZE_ONLY
from vllm_backend.tokenization import TokenIdError, check_token_ids, tokenize_only_arrays


def test_ids_inside_the_vocabulary_pass() -> None:
    check_token_ids([0, 5, 49151], max_token_id=49151)


@pytest.mark.parametrize(("ids", "named"), [([1, 49152], "49152 at position 1"), ([-1], "-1 at position 0")])
def test_ids_outside_the_vocabulary_are_refused_by_value_and_position(ids: list[int], named: str) -> None:
    with pytest.raises(TokenIdError, match=named) as caught:
        check_token_ids(ids, max_token_id=49151)
    assert "0 to 49151" in str(caught.value)


def test_the_answer_carries_text_ids_and_context_length() -> None:
    arrays = tokenize_only_arrays("héllo", [1, 2, 3], None, 2048)
    assert set(arrays) == {"text_output", "token_ids", "max_model_len"}
    assert arrays["text_output"].tolist() == ["héllo".encode()]
    assert arrays["token_ids"].dtype == np.int32 and arrays["token_ids"].tolist() == [1, 2, 3]
    assert arrays["max_model_len"].dtype == np.uint32 and arrays["max_model_len"].tolist() == [2048]


def test_token_strings_only_when_asked_and_an_empty_prompt_has_no_ids() -> None:
    arrays = tokenize_only_arrays("", [], ["<s>", None], 8)  # type: ignore[list-item]
    assert arrays["token_ids"].shape == (0,)
    assert arrays["token_strs"].tolist() == [b"<s>", b""]


def test_every_answer_tensor_is_declared() -> None:
    outputs = {t["name"]: t["data_type"] for t in OUTPUTS}
    assert outputs["token_ids"] == "TYPE_INT32" and outputs["token_strs"] == "TYPE_STRING"
    assert outputs["max_model_len"] == "TYPE_UINT32"
    inputs = {t["name"]: t for t in INPUTS}
    for name in (TOKENIZE_ONLY, "return_token_strs", "add_special_tokens"):
        assert inputs[name]["data_type"] == "TYPE_BOOL" and inputs[name]["optional"]


def test_max_token_id_comes_from_the_tokenizer() -> None:
    class Tokenizer:
        max_token_id = 511

        def __len__(self) -> int:
            return 512

    assert compat.max_token_id(Tokenizer()) == 511
