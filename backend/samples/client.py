#!/usr/bin/env python3
"""Sample asyncio gRPC client for the vLLM backend.

Reads prompts from a file (one per line), sends every prompt as one request on a
single `stream_infer` stream, collects each request's `text_output` and writes one
block per prompt to the results file. Exits non-zero when any request failed.

    python backend/samples/client.py -m smollm2-135m-instruct -u localhost:8001 --streaming-mode
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_URL = "localhost:8001"
DEFAULT_RESULTS_FILE = Path("results.txt")
DEFAULT_PROMPTS_FILE = Path(__file__).resolve().with_name("prompts.txt")

# The finish_reason of a streamed response that is not its request's last.
NOT_FINISHED = "None"

# One item of the response stream: (request id or None, result, error message).
StreamEvent = tuple[str | None, grpcclient.InferResult | None, str | None]


# --------------------------------------------------------------------------- arguments


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; `argv` defaults to sys.argv[1:]."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", default=DEFAULT_MODEL, help="model name (default: %(default)s)")
    parser.add_argument("-u", "--url", default=DEFAULT_URL, help="Triton gRPC endpoint (default: %(default)s)")
    parser.add_argument(
        "-s", "--streaming-mode", action="store_true", help="stream the output: one response per generated delta"
    )
    parser.add_argument(
        "--exclude-inputs-in-outputs",
        action="store_true",
        help="do not prepend the prompt to the output (always the case when streaming)",
    )
    parser.add_argument(
        "-l", "--lora-name", default=None, help="LoRA adapter, sent as the sampling parameter lora_name"
    )
    parser.add_argument(
        "-i", "--iterations", type=_positive_int, default=1, help="send the prompt list this many times (default: 1)"
    )
    parser.add_argument(
        "--offset", type=_non_negative_int, default=0, help="first request id; ids count up from it (default: 0)"
    )
    parser.add_argument(
        "-o", "--results-file", type=Path, default=DEFAULT_RESULTS_FILE, help="output file (default: %(default)s)"
    )
    parser.add_argument(
        "--input-prompts",
        type=Path,
        default=DEFAULT_PROMPTS_FILE,
        help="prompts, one per line; blank lines are skipped (default: prompts.txt beside this script)",
    )
    parser.add_argument("--max-tokens", type=_positive_int, default=64, help="tokens to generate (default: 64)")
    parser.add_argument(
        "--temperature", type=_non_negative_float, default=0.0, help="sampling temperature (default: 0, greedy)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every request and response")
    return parser.parse_args(argv)


def read_prompts(path: Path) -> list[str]:
    """The file's non-blank lines, without their line endings."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip()]


def plan_requests(prompts: Sequence[str], iterations: int, offset: int) -> list[tuple[str, str]]:
    """(request id, prompt) for every request: the prompt list `iterations` times, ids counting up from `offset`."""
    repeated = [prompt for _ in range(iterations) for prompt in prompts]
    return [(str(offset + index), prompt) for index, prompt in enumerate(repeated)]


# --------------------------------------------------------------------------- requests


def sampling_parameters(max_tokens: int, temperature: float, lora_name: str | None = None) -> dict[str, Any]:
    """The JSON object sent as `sampling_parameters`."""
    params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
    if lora_name:
        params["lora_name"] = lora_name
    return params


def _input(name: str, datatype: str, data: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    return tensor


def _bytes(text: str) -> np.ndarray:
    return np.array([text.encode("utf-8")], dtype=np.object_)


def _bool(value: bool) -> np.ndarray:
    return np.array([value], dtype=bool)


def build_request(
    model: str,
    request_id: str,
    prompt: str,
    *,
    streaming: bool,
    exclude_input: bool,
    sampling: dict[str, Any],
) -> dict[str, Any]:
    """One item for `stream_infer`'s request iterator (the keyword arguments of one request)."""
    inputs = [
        _input("text_input", "BYTES", _bytes(prompt)),
        _input("stream", "BOOL", _bool(streaming)),
        _input("sampling_parameters", "BYTES", _bytes(json.dumps(sampling))),
        # Streaming sends only the new text, never the prompt, and the backend rejects
        # streaming with an explicit false here; so streaming always sends true.
        _input("exclude_input_in_output", "BOOL", _bool(exclude_input or streaming)),
    ]
    if streaming:
        # The finish reason tells the client which streamed response is a request's last
        # (see ResponseCollector).
        inputs.append(_input("return_finish_reason", "BOOL", _bool(True)))
    return {"model_name": model, "inputs": inputs, "request_id": request_id}


# --------------------------------------------------------------------------- responses


@dataclass
class RequestOutcome:
    """What one request produced."""

    request_id: str
    prompt: str
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False
    responses: int = 0

    @property
    def ok(self) -> bool:
        return self.done and self.error is None


def _first_string(result: grpcclient.InferResult, name: str) -> str | None:
    """Element 0 of a BYTES output (the first sequence), or None when the response lacks the output."""
    array = result.as_numpy(name)
    if array is None or array.size == 0:
        return None
    item = array.reshape(-1)[0]
    return item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)


def _final_flag(result: grpcclient.InferResult) -> bool:
    parameters = result.get_response().parameters
    return "triton_final_response" in parameters and parameters["triton_final_response"].bool_param


class ResponseCollector:
    """Matches stream responses to requests by id and concatenates their text.

    How the end of a request is known: the model is decoupled, so a request may get
    many responses. Triton sets the response parameter `triton_final_response` on what
    it forwards (true on the last), but when the backend sends the final flag on its
    own, with no response, Triton forwards that as an empty response only if the
    request set `triton_enable_empty_final_response`, which tritonclient's aio API does
    not let a client set (it is a reserved parameter): then no response the client
    sees says "final". So the client does not wait for a final flag: without
    streaming, a request gets exactly one response, and the first one ends it; with
    streaming, the request asks for `finish_reason` (return_finish_reason), which is
    "None" on every response but the last, so a finish_reason other than "None" ends
    it. A `triton_final_response` that is true also ends it, and an error always does.
    The stream itself closes once every request is complete.
    """

    def __init__(self, requests: Sequence[tuple[str, str]], streaming: bool) -> None:
        self.streaming = streaming
        self.outcomes = {request_id: RequestOutcome(request_id, prompt) for request_id, prompt in requests}
        self.unattributed: list[str] = []

    def pending(self) -> list[RequestOutcome]:
        return [outcome for outcome in self.outcomes.values() if not outcome.done]

    def add(self, request_id: str | None, result: grpcclient.InferResult | None, error: str | None) -> None:
        """Take one response: a result, or an error message."""
        outcome = self.outcomes.get(request_id) if request_id else None
        if outcome is None:
            pending = self.pending()
            if error is not None and len(pending) == 1:
                outcome = pending[0]  # an error without an id can only be the one open request's
            else:
                unknown = f"response for unknown request id {request_id!r}"
                self.unattributed.append(error if error is not None else unknown)
                return
        outcome.responses += 1
        if error is not None:
            outcome.error = error if outcome.error is None else f"{outcome.error}; {error}"
            outcome.done = True
            return
        if result is None or outcome.done:
            return  # nothing follows a request's last response but, possibly, an empty one
        text = _first_string(result, "text_output")
        if text is not None:
            outcome.text += text
        reason = _first_string(result, "finish_reason")
        if reason is not None:
            outcome.finish_reason = reason
        finished = reason is not None and reason != NOT_FINISHED
        if not self.streaming or finished or _final_flag(result):
            outcome.done = True

    def close(self, stream_error: str | None = None) -> list[RequestOutcome]:
        """The outcomes in request order, once the stream has ended; open requests count as failed."""
        for outcome in self.pending():
            reasons = [stream_error or "the stream ended before the request's last response"]
            reasons += [f"unattributed stream error: {message}" for message in self.unattributed]
            outcome.error = "; ".join(reasons)
        return list(self.outcomes.values())


async def stream_events(response_iterator: Any) -> AsyncIterator[StreamEvent]:
    """(request id, result, error) for each response of a `stream_infer` call.

    tritonclient's aio iterator yields (None, exception) for an error response and so
    drops its request id, though Triton sets `infer_response.id` on error responses.
    Where the iterator exposes its gRPC call (tritonclient 2.x: the private attribute
    `_grpc_call`), the raw ModelStreamInferResponse messages are read instead, so an
    error keeps its id; otherwise the ResponseCollector attributes an id-less error
    when only one request is open.
    """
    call = getattr(response_iterator, "_grpc_call", None)
    if call is None:
        async for result, error in response_iterator:
            if error is not None:
                yield None, None, error.message()
            else:
                yield result.get_response().id, result, None
        return
    async for response in call:
        if response.error_message:
            yield response.infer_response.id or None, None, response.error_message
        else:
            result = grpcclient.InferResult(response.infer_response)
            yield result.get_response().id, result, None


def _describe_stream_error(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"stream failed: {exc.code().name}: {exc.details()}"
    if isinstance(exc, InferenceServerException):
        return f"stream failed: {exc.message()}"
    return f"stream failed: {exc}"


async def consume_stream(
    response_iterator: Any, collector: ResponseCollector, verbose: bool = False
) -> list[RequestOutcome]:
    """Feed every response to the collector until the stream ends; a broken stream fails the open requests."""
    try:
        async for request_id, result, error in stream_events(response_iterator):
            collector.add(request_id, result, error)
            if verbose:
                outcome = collector.outcomes.get(request_id or "")
                state = "error" if error else ("last" if outcome is not None and outcome.done else "partial")
                print(f"<- request {request_id}: {state} response", file=sys.stderr)
    except (grpc.RpcError, InferenceServerException) as exc:
        return collector.close(_describe_stream_error(exc))
    return collector.close()


async def run(args: argparse.Namespace, prompts: Sequence[str]) -> list[RequestOutcome]:
    """Send every request on one stream and collect the outcomes, in request order."""
    plan = plan_requests(prompts, args.iterations, args.offset)
    sampling = sampling_parameters(args.max_tokens, args.temperature, args.lora_name)
    collector = ResponseCollector(plan, streaming=args.streaming_mode)

    async def requests() -> AsyncIterator[dict[str, Any]]:
        for request_id, prompt in plan:
            if args.verbose:
                print(f"-> request {request_id}: {prompt!r}", file=sys.stderr)
            yield build_request(
                args.model,
                request_id,
                prompt,
                streaming=args.streaming_mode,
                exclude_input=args.exclude_inputs_in_outputs,
                sampling=sampling,
            )

    async with aioclient.InferenceServerClient(url=args.url, verbose=args.verbose) as client:
        response_iterator = client.stream_infer(inputs_iterator=requests())
        return await consume_stream(response_iterator, collector, verbose=args.verbose)


# --------------------------------------------------------------------------- results


def format_results(outcomes: Sequence[RequestOutcome]) -> str:
    """One block per request: its id, prompt, and output or error."""
    blocks = []
    for outcome in outcomes:
        lines = [f"=== request {outcome.request_id} ===", "Prompt:", outcome.prompt]
        if outcome.ok:
            lines += ["Output:", outcome.text]
        else:
            lines += ["Error:", outcome.error or "no response"]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def write_results(path: Path, outcomes: Sequence[RequestOutcome]) -> None:
    path.write_text(format_results(outcomes), encoding="utf-8")


def summary(outcomes: Sequence[RequestOutcome], results_file: Path) -> str:
    failed = [outcome for outcome in outcomes if not outcome.ok]
    return (
        f"{len(outcomes)} requests: {len(outcomes) - len(failed)} succeeded, {len(failed)} failed; "
        f"results written to {results_file}"
    )


def report_failures(outcomes: Sequence[RequestOutcome]) -> None:
    for outcome in outcomes:
        if not outcome.ok:
            print(f"request {outcome.request_id} failed (prompt {outcome.prompt!r}): {outcome.error}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        prompts = read_prompts(args.input_prompts)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: cannot read prompts from {args.input_prompts}: {exc}", file=sys.stderr)
        return 2
    if not prompts:
        print(f"error: no prompts in {args.input_prompts}", file=sys.stderr)
        return 2
    outcomes = asyncio.run(run(args, prompts))
    write_results(args.results_file, outcomes)
    report_failures(outcomes)
    print(summary(outcomes, args.results_file))
    return 0 if all(outcome.ok for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
