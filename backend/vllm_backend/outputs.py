"""Engine outputs to the backend's output tensors (as numpy arrays)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_backend.interface import OPTIONAL_OUTPUTS, SPARSE_OUTPUTS


@dataclass(frozen=True)
class OutputOptions:
    """What one request asked to receive."""

    n: int
    prefix: str = ""  # the prompt, when the output must include it
    wanted: frozenset[str] = frozenset()  # names of the additional outputs asked for
    sparse: bool = False  # intermediate streamed responses carry only outputs with news
    # vLLM was asked for the sampled tokens' logprobs only to compute the cumulative logprob: not an output.
    implicit_logprobs: bool = False
    # The first prompt token's text: vLLM gives that token no logprobs (nothing precedes it), so no text either.
    first_prompt_token: str = ""

    @classmethod
    def from_flags(
        cls,
        n: int,
        prefix: str,
        flags: dict[str, bool],
        logprobs: int | None = None,
        first_prompt_token: str = "",
    ) -> "OutputOptions":
        wanted = frozenset(output for flag, output in OPTIONAL_OUTPUTS.items() if flags.get(flag))
        return cls(
            n=n,
            prefix=prefix,
            wanted=wanted,
            sparse=bool(flags.get(SPARSE_OUTPUTS)),
            implicit_logprobs="cumulative_logprob" in wanted and logprobs is None,
            first_prompt_token=first_prompt_token,
        )

    @property
    def logprobs_to_ask(self) -> int | None:
        """What vLLM must be asked for beyond the request's own `logprobs`: without logprobs it computes no
        cumulative logprob (it would read 0.0), so a request for it alone asks for the sampled tokens' (0)."""
        return 0 if self.implicit_logprobs else None


def implied_sampling(flags: dict[str, bool]) -> dict[str, Any]:
    """Sampling parameters the asked-for outputs need, for the request to set where it leaves them unset: vLLM
    computes the prompt's logprobs only with `prompt_logprobs` (0: the prompt tokens' own, no alternatives)."""
    return {"prompt_logprobs": 0} if flags.get("return_prompt_logprobs") else {}


def _entry(chosen: int, position: Any) -> dict[str, dict[str, Any]]:
    """One position's logprobs, the chosen token (sampled, or the prompt's own) first, so clients can tell it
    from the alternatives."""
    order = [chosen, *(token_id for token_id in position if token_id != chosen)]
    return {
        str(token_id): {
            "logprob": position[token_id].logprob,
            "rank": position[token_id].rank,
            "decoded_token": position[token_id].decoded_token,
        }
        for token_id in order
        if token_id in position
    }


def _logprobs_json(output: Any) -> str:
    """One entry per new token."""
    if output.logprobs is None:
        return "null"
    return json.dumps([_entry(sampled, position) for sampled, position in zip(output.token_ids, output.logprobs)])


def _prompt_logprobs_json(request_output: Any, first_token: str) -> str:
    """One entry per prompt token. The first has none in vLLM (None, or empty in its flat form): its entry gives
    the token with a null logprob and rank, as OpenAI's echo lists it."""
    entries = []
    for i, (token_id, position) in enumerate(zip(request_output.prompt_token_ids, request_output.prompt_logprobs)):
        if position:
            entries.append(_entry(token_id, position))
        else:
            text = first_token if i == 0 else None
            entries.append({str(token_id): {"logprob": None, "rank": None, "decoded_token": text}})
    return json.dumps(entries)


class ResponseArrays:
    """One request's response tensors, response after response.

    With `options.sparse`, an intermediate response leaves out what carries no news (each tensor costs the
    stub and Triton about as much as the text): `finish_reason` comes when a sequence finishes, and the
    counts come with the final response, `num_output_tokens` then covering every token not counted yet.
    """

    def __init__(self, options: OutputOptions) -> None:
        self.options = options
        self._uncounted = [0] * options.n  # output tokens generated since the last response that counted them
        self._prompt_logprobs_sent = False

    def _prompt_logprobs(self, request_output: Any) -> str:
        """The prompt's logprobs once, in the first response whose output has them (vLLM's first streamed
        output, or its only one), "null" in the others."""
        if self._prompt_logprobs_sent or not request_output.prompt_logprobs:
            return "null"
        self._prompt_logprobs_sent = True
        return _prompt_logprobs_json(request_output, self.options.first_prompt_token)

    def __call__(self, request_output: Any) -> dict[str, np.ndarray]:
        options = self.options
        texts = [""] * options.n
        reasons = ["None"] * options.n
        cumulative = [0.0] * options.n
        logprobs = ["null"] * options.n
        counts = self._uncounted
        for output in request_output.outputs:
            i = output.index
            if i >= options.n:
                continue
            texts[i] = options.prefix + output.text
            reasons[i] = str(output.finish_reason)
            cumulative[i] = output.cumulative_logprob or 0.0
            if not options.implicit_logprobs:
                logprobs[i] = _logprobs_json(output)
            counts[i] += len(output.token_ids)
        held_back = options.sparse and not request_output.finished
        arrays: dict[str, np.ndarray] = {"text_output": np.array([t.encode() for t in texts], dtype=np.object_)}
        wanted = options.wanted
        if "finish_reason" in wanted and not (held_back and reasons.count("None") == options.n):
            arrays["finish_reason"] = np.array([r.encode() for r in reasons], dtype=np.object_)
        if "cumulative_logprob" in wanted:
            arrays["cumulative_logprob"] = np.array(cumulative, dtype=np.float32)
        if "logprobs" in wanted:
            arrays["logprobs"] = np.array([lp.encode() for lp in logprobs], dtype=np.object_)
        if "prompt_logprobs" in wanted:
            prompt = self._prompt_logprobs(request_output)
            if not (held_back and prompt == "null"):
                arrays["prompt_logprobs"] = np.array([prompt.encode()], dtype=np.object_)
        if held_back:
            return arrays
        if "num_input_tokens" in wanted:
            arrays["num_input_tokens"] = np.array([len(request_output.prompt_token_ids or [])], dtype=np.uint32)
        if "num_output_tokens" in wanted:
            arrays["num_output_tokens"] = np.array(counts, dtype=np.uint32)
        self._uncounted = [0] * options.n
        return arrays
