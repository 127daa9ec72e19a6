"""The model interface: the stock vLLM backend's tensors, plus our chat inputs.

Auto-complete adds whatever the user's config.pbtxt left out and never
changes what the user declared.
"""

from __future__ import annotations

from typing import Any

INPUTS: list[dict[str, Any]] = [
    # `text_input` is required by the stock backend; it is optional here only
    # because a request may give `messages` instead.
    {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
    {"name": "image", "data_type": "TYPE_STRING", "dims": [-1], "optional": True},
    {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
    {"name": "exclude_input_in_output", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_finish_reason", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_cumulative_logprob", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_logprobs", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_num_input_tokens", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_num_output_tokens", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    # Ours: chat messages (a JSON list) rendered with the model's own chat template,
    # and keyword arguments for that template (a JSON object).
    {"name": "messages", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
    # Ours: a prompt given as token ids (OpenAI's completions accept those).
    {"name": "prompt_token_ids", "data_type": "TYPE_INT32", "dims": [-1], "optional": True},
    {"name": "chat_template_kwargs", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
    # Ours: intermediate streamed responses leave out the additional outputs that carry no news.
    {"name": "sparse_outputs", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    # Ours: the prompt's own logprobs (OpenAI's completions with `echo` and `logprobs` list them first).
    {"name": "return_prompt_logprobs", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    # Ours: answer from the engine's tokenizer without running the engine (vLLM's /tokenize and /detokenize):
    # the prompt's `text_output`, `token_ids` and the model's `max_model_len`, and `token_strs` when asked for.
    {"name": "tokenize_only", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_token_strs", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    # Ours: special tokens (BOS) added when tokenizing; default true for text_input, false for messages.
    {"name": "add_special_tokens", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
]

OUTPUTS: list[dict[str, Any]] = [
    {"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "finish_reason", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "cumulative_logprob", "data_type": "TYPE_FP32", "dims": [-1]},
    {"name": "logprobs", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "num_input_tokens", "data_type": "TYPE_UINT32", "dims": [1]},
    {"name": "num_output_tokens", "data_type": "TYPE_UINT32", "dims": [-1]},
    # Ours: one JSON list for the request (its sequences share the prompt), in the first response that has it.
    {"name": "prompt_logprobs", "data_type": "TYPE_STRING", "dims": [1]},
    # Ours: the answer of a tokenize-only request.
    {"name": "token_ids", "data_type": "TYPE_INT32", "dims": [-1]},
    {"name": "token_strs", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "max_model_len", "data_type": "TYPE_UINT32", "dims": [1]},
]

# Additional outputs, each sent only when its `return_*` input is true.
OPTIONAL_OUTPUTS = {
    "return_finish_reason": "finish_reason",
    "return_cumulative_logprob": "cumulative_logprob",
    "return_logprobs": "logprobs",
    "return_num_input_tokens": "num_input_tokens",
    "return_num_output_tokens": "num_output_tokens",
    "return_prompt_logprobs": "prompt_logprobs",
}
SPARSE_OUTPUTS = "sparse_outputs"
TOKENIZE_ONLY = "tokenize_only"


def missing_tensors(declared: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tensors of `wanted` whose names the config does not declare yet."""
    names = {tensor["name"] for tensor in declared}
    return [tensor for tensor in wanted if tensor["name"] not in names]
