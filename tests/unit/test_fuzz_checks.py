"""The fuzz test's own helpers (tests/fuzz_checks.py): capping drawn bodies, and judging streams."""

from __future__ import annotations

from tests.fuzz_checks import MAX_CHOICES, MAX_PROMPTS, MAX_TOKENS, stream_problems, tame_body


def test_costs_are_capped_and_invalid_values_left_for_the_gateway() -> None:
    body = {"model": "drawn", "prompt": ["a"] * 10, "max_tokens": 10_000, "n": 100, "min_tokens": 500, "best_of": -3}
    tamed = tame_body(body, "served")
    assert tamed["model"] == "served"
    assert 1 <= tamed["max_tokens"] <= MAX_TOKENS and 1 <= tamed["n"] <= MAX_CHOICES
    assert 0 <= tamed["min_tokens"] <= MAX_TOKENS and len(tamed["prompt"]) == MAX_PROMPTS
    assert tamed["best_of"] == -3  # invalid: the gateway must refuse it
    assert body["max_tokens"] == 10_000  # the drawn body itself is left alone


def test_a_missing_token_limit_gets_one_and_wrong_types_stay() -> None:
    assert tame_body({"messages": []}, None)["max_tokens"] == MAX_TOKENS
    assert tame_body({"model": 5, "max_tokens": "many"}, "served") == {"model": 5, "max_tokens": "many"}
    assert tame_body([1, 2], "served") == [1, 2]


def test_a_stream_must_end_with_done() -> None:
    assert stream_problems('data: {"choices": []}\n\ndata: [DONE]\n\n') == []
    assert stream_problems('data: {"choices": []}\n\n')
    assert stream_problems("")


def test_stream_events_must_be_json_and_errors_in_openai_shape() -> None:
    error = '{"error": {"message": "m", "type": "t", "param": null, "code": null}}'
    assert stream_problems(f"data: {error}\n\ndata: [DONE]\n\n") == []
    assert stream_problems('data: {"error": "boom"}\n\ndata: [DONE]\n\n')
    assert stream_problems("data: {not json\n\ndata: [DONE]\n\n")
    assert stream_problems("event: x\n\ndata: [DONE]\n\n")


def test_valid_seeds_are_left_out_and_invalid_ones_kept() -> None:
    assert "seed" not in tame_body({"seed": 7}, None)
    assert tame_body({"seed": 2**64}, None)["seed"] == 2**64
    assert tame_body({"seed": "x"}, None)["seed"] == "x"
