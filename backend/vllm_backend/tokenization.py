"""Tokenize-only requests (vLLM's /tokenize and /detokenize): their answer tensors, and the token-id check that
generation shares. Pure: numpy arrays out, no Triton or vLLM."""

from __future__ import annotations

import numpy as np


class TokenIdError(ValueError):
    """Token ids the model's vocabulary does not have."""


def check_token_ids(ids: list[int], max_token_id: int) -> None:
    """Refuses ids outside 0..max_token_id, naming the first: the tokenizer would decode them to nothing, and the
    engine would index past its embeddings."""
    for position, token_id in enumerate(ids):
        if not 0 <= token_id <= max_token_id:
            raise TokenIdError(
                f"token id {token_id} at position {position} is out of the vocabulary (0 to {max_token_id})"
            )


def tokenize_only_arrays(
    text: str, ids: list[int], token_strs: list[str] | None, max_model_len: int
) -> dict[str, np.ndarray]:
    """The one response of a tokenize-only request: the prompt as text and as tokens, and the context length."""
    arrays = {
        "text_output": np.array([text.encode()], dtype=np.object_),
        "token_ids": np.array(ids, dtype=np.int32),
        "max_model_len": np.array([max_model_len], dtype=np.uint32),
    }
    if token_strs is not None:
        arrays["token_strs"] = np.array([(s or "").encode() for s in token_strs], dtype=np.object_)
    return arrays
