"""Fuzzing: schemathesis draws requests from the gateway's own OpenAPI document (served at /openapi.json) and sends
them to a real gateway in front of a real Triton (the fast model). Valid and invalid requests alike must never get a
5xx, every 4xx must carry OpenAI's error shape, and every stream must end with [DONE].

FUZZ_EXAMPLES sets how many requests are drawn in all (CI: a few hundred; `make fuzz`: 5,000)."""

from __future__ import annotations

import os
from collections import Counter

import httpx
import pytest
import requests
import schemathesis
import schemathesis.specs.openapi.schemas  # noqa: F401  imported at collection, see below
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from localstack.stack import LocalStack
from tests.fuzz_checks import ERROR_KEYS, stream_problems, tame_body

# schemathesis loads its OpenAPI modules on first use. Loaded that late, deep in a fixture's stack, pytest's
# assertion rewriting of them hit CPython 3.11.7's "AST constructor recursion depth mismatch" (SystemError) in a
# fresh-clone CI run; imported above, at collection, they load at a shallow depth.

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "240"))
# A request that hangs fails the test instead of stalling it: small generations take well under a second.
REQUEST_TIMEOUT_S = 60.0
# The generation endpoints get most of the examples: their bodies are the large input space.
SHARES = {
    ("POST", "/v1/completions"): 0.37,
    ("POST", "/v1/chat/completions"): 0.37,
    ("POST", "/tokenize"): 0.03,
    ("POST", "/detokenize"): 0.03,
    ("GET", "/v1/models/{model_id}"): 0.08,
    ("GET", "/v1/models"): 0.03,
    ("GET", "/health/live"): 0.03,
    ("GET", "/health/ready"): 0.03,
    ("GET", "/metrics"): 0.03,
}


@pytest.fixture(scope="module")
def gateway_schema(fast_stack: LocalStack) -> schemathesis.BaseSchema:
    document = httpx.get(f"{fast_stack.gateway_url}/openapi.json", timeout=30).raise_for_status().json()
    return schemathesis.openapi.from_dict(document)


def _error_shape_problem(response: requests.Response) -> str | None:
    """Why a 4xx body is not OpenAI's error object, or None when it is."""
    try:
        body = response.json()
    except ValueError:
        return f"not JSON: {response.text[:200]!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or set(error) != ERROR_KEYS:
        return f"not OpenAI's error shape: {body!r}"[:300]
    if not isinstance(error["message"], str) or not isinstance(error["type"], str):
        return f"message and type must be strings: {error!r}"[:300]
    return None


def _problems(response: requests.Response, streamed: bool) -> list[str]:
    status = response.status_code
    if status >= 500:
        return [f"status {status}: {response.text[:300]!r}"]
    if 400 <= status < 500:
        problem = _error_shape_problem(response)
        return [problem] if problem else []
    if streamed and response.headers.get("content-type", "").startswith("text/event-stream"):
        return stream_problems(response.text)
    return []


def fuzz_operation(schema: schemathesis.BaseSchema, base_url: str, model: str, method: str, path: str, examples: int) -> Counter[str]:
    """Sends `examples` drawn requests (valid and invalid) to one operation; fails on the first bad answer.
    Returns how many answers of each status came back."""
    operation = schema[path][method]
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE))
    # Mostly the served model, so that valid bodies reach the engine; sometimes the generated name (a 404).
    use_served_model = st.sampled_from([True, True, True, False])
    seen: Counter[str] = Counter()
    session = requests.Session()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
        phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
    )
    @given(case=cases, served=use_served_model)
    def fuzz(case: schemathesis.Case, served: bool) -> None:
        if served and case.path_parameters and "model_id" in case.path_parameters:
            case.path_parameters["model_id"] = model
        case.body = tame_body(case.body, model if served else None)
        streamed = isinstance(case.body, dict) and case.body.get("stream") is True
        # Sent with requests itself: schemathesis's own call stops reading a stream after 20 events.
        response = session.request(**case.as_transport_kwargs(base_url=base_url), timeout=REQUEST_TIMEOUT_S)
        seen[str(response.status_code)] += 1
        problems = _problems(response, streamed)
        assert not problems, f"{problems}\nreproduce with: {case.as_curl_command()}"

    try:
        fuzz()
    finally:
        session.close()
    return seen


@pytest.mark.parametrize(("method", "path"), list(SHARES))
def test_fuzzed_requests_get_no_5xx_and_openai_errors(
    gateway_schema: schemathesis.BaseSchema, fast_stack: LocalStack, method: str, path: str
) -> None:
    examples = max(1, round(FUZZ_EXAMPLES * SHARES[(method, path)]))
    seen = fuzz_operation(gateway_schema, fast_stack.gateway_url, fast_stack.config.model_name, method, path, examples)
    total = sum(seen.values())
    print(f"\nfuzz {method} {path}: {total} requests, statuses {dict(sorted(seen.items()))}")
    assert total >= 1


# Inputs the generators above never draw (their text is encodable, their integers mostly small), each of which got a
# 5xx before its fix: half of a UTF-16 pair, and integers past 64 bits. Raw JSON, as a client could send it.
_RAW_BODIES = {
    "surrogate in a prompt": ("/v1/completions", '{"model": "MODEL", "prompt": "a\\ud800b", "max_tokens": 2}'),
    "surrogate in a message": (
        "/v1/chat/completions",
        '{"model": "MODEL", "messages": [{"role": "user", "content": "a\\udfff"}], "max_tokens": 2}',
    ),
    "seed past 64 bits": ("/v1/completions", f'{{"model": "MODEL", "prompt": "hi", "seed": {2**64}}}'),
    "top_k past 64 bits": ("/v1/completions", f'{{"model": "MODEL", "prompt": "hi", "top_k": {2**64}}}'),
}


@pytest.mark.parametrize("name", list(_RAW_BODIES))
def test_inputs_fuzzing_found_get_a_400_in_openai_shape(fast_stack: LocalStack, name: str) -> None:
    path, template = _RAW_BODIES[name]
    body = template.replace("MODEL", fast_stack.config.model_name).encode()
    headers = {"Content-Type": "application/json"}
    response = requests.post(f"{fast_stack.gateway_url}{path}", data=body, headers=headers, timeout=60)
    assert response.status_code == 400, response.text
    assert _error_shape_problem(response) is None


def test_prompts_that_all_fail_together_leave_triton_running(fast_stack: LocalStack) -> None:
    """Fuzzing found this one through Triton itself: with `triton_grpc_error` on, Triton 2.51 aborted within a few
    such requests (their streams end in errors while the gateway cancels the siblings of the first); with it off,
    the same cancels now and then deadlocked its gRPC frontend, which then answered nothing. The gateway now lets
    such streams end by themselves. Each prompt is refused at once by the backend (min_tokens above max_tokens),
    so that the three fail together."""
    body = {"model": fast_stack.config.model_name, "prompt": ["a", "b", "c"], "min_tokens": 5, "max_tokens": 2}
    for _ in range(40):
        response = requests.post(f"{fast_stack.gateway_url}/v1/completions", json=body, timeout=60)
        assert response.status_code == 400, response.text
        assert _error_shape_problem(response) is None
    assert fast_stack.triton is not None and fast_stack.triton.running(), fast_stack.health()
    fine = {"model": fast_stack.config.model_name, "prompt": ["a", "b", "c"], "max_tokens": 2}
    assert requests.post(f"{fast_stack.gateway_url}/v1/completions", json=fine, timeout=60).status_code == 200
