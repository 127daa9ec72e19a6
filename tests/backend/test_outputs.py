from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from vllm_backend.outputs import OutputOptions, ResponseArrays, implied_sampling


@dataclass
class Logprob:
    logprob: float
    rank: int
    decoded_token: str


@dataclass
class Completion:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    cumulative_logprob: float | None = None
    logprobs: list | None = None


@dataclass
class RequestOutput:
    prompt: str
    prompt_token_ids: list[int]
    outputs: list[Completion] = field(default_factory=list)
    finished: bool = True
    prompt_logprobs: list | None = None


ALL = {
    "return_finish_reason": True,
    "return_cumulative_logprob": True,
    "return_logprobs": True,
    "return_num_input_tokens": True,
    "return_num_output_tokens": True,
}


def test_only_text_without_flags() -> None:
    out = RequestOutput("p", [1, 2], [Completion(0, "hi", [5])])
    arrays = ResponseArrays(OutputOptions.from_flags(1, "", {}))(out)
    assert list(arrays) == ["text_output"]
    assert arrays["text_output"].tolist() == [b"hi"]


def test_every_output_when_asked_and_sequences_placed_by_index() -> None:
    out = RequestOutput(
        "p",
        [1, 2, 3],
        [Completion(1, "b", [7, 8], "length", -1.5, [{7: Logprob(-0.5, 1, "b")}, {8: Logprob(-1.0, 2, "")}])],
    )
    arrays = ResponseArrays(OutputOptions.from_flags(2, "", ALL, logprobs=1))(out)
    assert arrays["text_output"].tolist() == [b"", b"b"]
    assert arrays["finish_reason"].tolist() == [b"None", b"length"]
    assert arrays["cumulative_logprob"].dtype == np.float32
    assert arrays["cumulative_logprob"].tolist() == [0.0, -1.5]
    assert arrays["num_input_tokens"].tolist() == [3] and arrays["num_input_tokens"].dtype == np.uint32
    assert arrays["num_output_tokens"].tolist() == [0, 2]
    assert arrays["logprobs"][0] == b"null"
    assert json.loads(arrays["logprobs"][1]) == [
        {"7": {"logprob": -0.5, "rank": 1, "decoded_token": "b"}},
        {"8": {"logprob": -1.0, "rank": 2, "decoded_token": ""}},
    ]


def test_prompt_is_prepended_when_input_is_not_excluded() -> None:
    out = RequestOutput("Hello", [1], [Completion(0, " world", [2], "stop")])
    arrays = ResponseArrays(OutputOptions.from_flags(1, "Hello", {}))(out)
    assert arrays["text_output"].tolist() == [b"Hello world"]


def test_sampled_token_comes_first_in_logprobs() -> None:
    position = {3: Logprob(-0.1, 1, "a"), 9: Logprob(-2.0, 4, "z"), 4: Logprob(-0.5, 2, "b")}
    out = RequestOutput("p", [1], [Completion(0, "z", [9], None, -2.0, [position])])
    arrays = ResponseArrays(OutputOptions.from_flags(1, "", ALL, logprobs=2))(out)
    [entry] = json.loads(arrays["logprobs"][0])
    assert list(entry) == ["9", "3", "4"]


COUNTS = {"return_finish_reason": True, "return_num_input_tokens": True, "return_num_output_tokens": True}


def test_counts_per_response_without_sparse_outputs() -> None:
    arrays = ResponseArrays(OutputOptions.from_flags(1, "", COUNTS))
    first = arrays(RequestOutput("p", [1, 2], [Completion(0, "a", [5, 6])], finished=False))
    assert sorted(first) == ["finish_reason", "num_input_tokens", "num_output_tokens", "text_output"]
    assert first["num_output_tokens"].tolist() == [2]
    last = arrays(RequestOutput("p", [1, 2], [Completion(0, "b", [7], "length")]))
    assert last["num_output_tokens"].tolist() == [1]


def test_sparse_outputs_hold_counts_until_the_final_response() -> None:
    arrays = ResponseArrays(OutputOptions.from_flags(2, "", {**COUNTS, "sparse_outputs": True}))
    first = arrays(RequestOutput("p", [1, 2], [Completion(0, "a", [5, 6]), Completion(1, "x", [9])], finished=False))
    assert list(first) == ["text_output"]
    # A sequence that finishes early says so at once; the counts still wait.
    second = arrays(RequestOutput("p", [1, 2], [Completion(1, "y", [8], "stop")], finished=False))
    assert sorted(second) == ["finish_reason", "text_output"]
    assert second["finish_reason"].tolist() == [b"None", b"stop"]
    last = arrays(RequestOutput("p", [1, 2], [Completion(0, "b", [7], "length")]))
    assert last["text_output"].tolist() == [b"b", b""]
    assert last["finish_reason"].tolist() == [b"length", b"None"]
    assert last["num_input_tokens"].tolist() == [2]
    assert last["num_output_tokens"].tolist() == [3, 2]  # every token not counted before


def test_a_cumulative_logprob_alone_asks_vllm_for_the_sampled_tokens_logprobs_but_returns_none() -> None:
    """Without logprobs vLLM computes no cumulative logprob (Triton's own CI for the stock backend found 0.0)."""
    options = OutputOptions.from_flags(1, "", ALL)  # the request set no `logprobs`
    assert options.implicit_logprobs and options.logprobs_to_ask == 0
    out = RequestOutput("p", [1], [Completion(0, "z", [9], "length", -2.0, [{9: Logprob(-2.0, 1, "z")}])])
    arrays = ResponseArrays(options)(out)
    assert arrays["cumulative_logprob"].tolist() == [-2.0]
    assert arrays["logprobs"].tolist() == [b"null"]  # not asked for by the request itself
    asked = OutputOptions.from_flags(1, "", ALL, logprobs=0)
    assert not asked.implicit_logprobs and asked.logprobs_to_ask is None
    assert OutputOptions.from_flags(1, "", {}).logprobs_to_ask is None  # nothing asked, nothing computed


PROMPT = {"return_prompt_logprobs": True}
# vLLM's prompt logprobs of the prompt [4, 7, 2]: nothing for the first token, then each token with the top ones.
PROMPT_LOGPROBS = [None, {3: Logprob(-0.2, 1, " b"), 7: Logprob(-1.5, 2, " a")}, {2: Logprob(-0.7, 1, "!")}]


def test_prompt_logprobs_list_every_prompt_token_its_own_first_and_the_first_without_a_logprob() -> None:
    options = OutputOptions.from_flags(1, "", PROMPT, first_prompt_token="Hi")
    out = RequestOutput("Hi a!", [4, 7, 2], [Completion(0, "x", [5], "length")], prompt_logprobs=PROMPT_LOGPROBS)
    arrays = ResponseArrays(options)(out)
    assert sorted(arrays) == ["prompt_logprobs", "text_output"]
    assert arrays["prompt_logprobs"].shape == (1,)  # one list for the request, whatever its n
    entries = json.loads(arrays["prompt_logprobs"][0])
    assert entries == [
        {"4": {"logprob": None, "rank": None, "decoded_token": "Hi"}},
        {
            "7": {"logprob": -1.5, "rank": 2, "decoded_token": " a"},
            "3": {"logprob": -0.2, "rank": 1, "decoded_token": " b"},
        },
        {"2": {"logprob": -0.7, "rank": 1, "decoded_token": "!"}},
    ]
    assert [next(iter(entry)) for entry in entries] == ["4", "7", "2"]  # the prompt's own token first
    flat = RequestOutput("Hi a!", [4, 7, 2], [], prompt_logprobs=[{}, *PROMPT_LOGPROBS[1:]])  # vLLM's flat form
    assert ResponseArrays(options)(flat)["prompt_logprobs"][0] == arrays["prompt_logprobs"][0]


def test_prompt_logprobs_come_once_in_a_stream() -> None:
    arrays = ResponseArrays(OutputOptions.from_flags(2, "", PROMPT, first_prompt_token="Hi"))
    first = arrays(RequestOutput("p", [4, 7, 2], [Completion(0, "a", [5])], False, PROMPT_LOGPROBS))
    assert len(json.loads(first["prompt_logprobs"][0])) == 3
    # vLLM's collector keeps the first output's prompt logprobs when it merges the next ones: sent once all the same.
    second = arrays(RequestOutput("p", [4, 7, 2], [Completion(1, "b", [6])], False, PROMPT_LOGPROBS))
    assert second["prompt_logprobs"].tolist() == [b"null"]
    sparse = ResponseArrays(OutputOptions.from_flags(1, "", {**PROMPT, "sparse_outputs": True}))
    assert "prompt_logprobs" in sparse(RequestOutput("p", [4, 7, 2], [Completion(0, "a", [5])], False, PROMPT_LOGPROBS))
    assert "prompt_logprobs" not in sparse(RequestOutput("p", [4, 7, 2], [Completion(0, "b", [6])], False, []))
    assert sparse(RequestOutput("p", [4, 7, 2], [Completion(0, "", [], "length")]))["prompt_logprobs"].tolist() == [b"null"]


def test_prompt_logprobs_are_asked_of_vllm_only_with_their_output() -> None:
    assert implied_sampling(PROMPT) == {"prompt_logprobs": 0}  # the prompt tokens' own logprobs, no alternatives
    assert implied_sampling({"return_logprobs": True}) == {}
    assert OutputOptions.from_flags(1, "", {}).wanted == frozenset()  # prompt logprobs in the sampling: not returned
