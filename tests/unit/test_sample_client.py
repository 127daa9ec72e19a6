"""The sample client's pure parts: arguments, the request built for a prompt, response
matching, and the results file. No server is involved."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

CLIENT_PATH = Path(__file__).resolve().parents[2] / "backend" / "samples" / "client.py"


def _load_client() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sample_client", CLIENT_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


client = _load_client()


def _decoded(request: dict[str, Any]) -> dict[str, tuple[str, list[int], list[Any]]]:
    """name -> (datatype, shape, values) for every InferInput of a request dict."""
    decoded = {}
    for tensor in request["inputs"]:
        raw = tensor._get_content()
        if tensor.datatype() == "BYTES":
            values = [item.decode("utf-8") for item in deserialize_bytes_tensor(raw)]
        elif tensor.datatype() == "BOOL":
            values = np.frombuffer(raw, dtype=bool).tolist()
        else:
            raise AssertionError(f"unexpected datatype {tensor.datatype()}")
        decoded[tensor.name()] = (tensor.datatype(), list(tensor.shape()), values)
    return decoded


def _result(request_id: str, text: str | None = None, finish_reason: str | None = None) -> InferResult:
    """An InferResult as the stream would carry it, with BYTES outputs."""
    response = service_pb2.ModelInferResponse(id=request_id, model_name="m")
    for name, value in (("text_output", text), ("finish_reason", finish_reason)):
        if value is None:
            continue
        response.outputs.add(name=name, datatype="BYTES", shape=[1])
        response.raw_output_contents.append(serialize_byte_tensor(np.array([value.encode()], dtype=np.object_)).item())
    return InferResult(response)


# --------------------------------------------------------------------------- arguments


def test_parse_args_defaults() -> None:
    args = client.parse_args([])
    assert args.model == "smollm2-135m-instruct"
    assert args.url == "localhost:8001"
    assert args.streaming_mode is False
    assert args.exclude_inputs_in_outputs is False
    assert args.lora_name is None
    assert args.iterations == 1
    assert args.offset == 0
    assert args.results_file == Path("results.txt")
    assert args.input_prompts == CLIENT_PATH.with_name("prompts.txt")
    assert args.max_tokens == 64
    assert args.temperature == 0
    assert args.verbose is False


def test_parse_args_flags() -> None:
    args = client.parse_args(
        ["-m", "other", "-u", "host:9001", "-s", "--exclude-inputs-in-outputs", "-l", "adapter", "-i", "3",
         "--offset", "100", "-o", "out.txt", "--input-prompts", "p.txt", "--max-tokens", "8", "--temperature", "0.7",
         "-v"]
    )  # fmt: skip
    assert (args.model, args.url, args.lora_name) == ("other", "host:9001", "adapter")
    assert args.streaming_mode and args.exclude_inputs_in_outputs and args.verbose
    assert (args.iterations, args.offset, args.max_tokens, args.temperature) == (3, 100, 8, 0.7)
    assert (args.results_file, args.input_prompts) == (Path("out.txt"), Path("p.txt"))


@pytest.mark.parametrize(
    "argv", [["-i", "0"], ["--offset", "-1"], ["--max-tokens", "0"], ["--temperature", "-0.1"], ["-i", "x"]]
)
def test_parse_args_rejects_bad_numbers(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        client.parse_args(argv)


def test_shipped_prompts_and_blank_lines(tmp_path: Path) -> None:
    assert len(client.read_prompts(client.DEFAULT_PROMPTS_FILE)) >= 3
    path = tmp_path / "prompts.txt"
    path.write_text("first prompt\n\n   \nsecond, with trailing newline\r\n", encoding="utf-8")
    assert client.read_prompts(path) == ["first prompt", "second, with trailing newline"]


def test_plan_requests_gives_unique_ids_from_offset() -> None:
    plan = client.plan_requests(["a", "b"], iterations=3, offset=10)
    assert plan == [("10", "a"), ("11", "b"), ("12", "a"), ("13", "b"), ("14", "a"), ("15", "b")]


# --------------------------------------------------------------------------- requests


def test_request_for_a_prompt_without_streaming() -> None:
    sampling = client.sampling_parameters(max_tokens=64, temperature=0.0)
    request = client.build_request(
        "smollm2-135m-instruct", "7", "Héllo, wörld", streaming=False, exclude_input=False, sampling=sampling
    )
    assert request["model_name"] == "smollm2-135m-instruct"
    assert request["request_id"] == "7"
    inputs = _decoded(request)
    assert list(inputs) == ["text_input", "stream", "sampling_parameters", "exclude_input_in_output"]
    assert inputs["text_input"] == ("BYTES", [1], ["Héllo, wörld"])
    assert inputs["stream"] == ("BOOL", [1], [False])
    datatype, shape, (raw_sampling,) = inputs["sampling_parameters"]
    assert (datatype, shape) == ("BYTES", [1])
    assert json.loads(raw_sampling) == {"max_tokens": 64, "temperature": 0.0}
    assert inputs["exclude_input_in_output"] == ("BOOL", [1], [False])


def test_request_with_exclude_input() -> None:
    sampling = client.sampling_parameters(max_tokens=64, temperature=0.0)
    request = client.build_request("m", "0", "p", streaming=False, exclude_input=True, sampling=sampling)
    assert _decoded(request)["exclude_input_in_output"] == ("BOOL", [1], [True])


def test_streaming_request_excludes_input_and_asks_for_finish_reason() -> None:
    sampling = client.sampling_parameters(max_tokens=16, temperature=0.5, lora_name="adapter")
    request = client.build_request("m", "3", "p", streaming=True, exclude_input=False, sampling=sampling)
    inputs = _decoded(request)
    assert inputs["stream"] == ("BOOL", [1], [True])
    assert inputs["exclude_input_in_output"] == ("BOOL", [1], [True])
    assert inputs["return_finish_reason"] == ("BOOL", [1], [True])
    sent = json.loads(inputs["sampling_parameters"][2][0])
    assert sent == {"max_tokens": 16, "temperature": 0.5, "lora_name": "adapter"}


def test_no_lora_name_unless_given() -> None:
    assert "lora_name" not in client.sampling_parameters(max_tokens=1, temperature=0.0)


# --------------------------------------------------------------------------- responses


def test_streaming_deltas_are_concatenated_per_request() -> None:
    collector = client.ResponseCollector([("0", "a"), ("1", "b")], streaming=True)
    collector.add("1", _result("1", "Hel", "None"), None)
    collector.add("0", _result("0", "x", "None"), None)
    collector.add("1", _result("1", "lo", "stop"), None)
    assert [o.request_id for o in collector.pending()] == ["0"]
    collector.add("0", _result("0", "y", "length"), None)
    outcomes = collector.close()
    assert [(o.request_id, o.text, o.finish_reason, o.ok) for o in outcomes] == [
        ("0", "xy", "length", True),
        ("1", "Hello", "stop", True),
    ]


def test_non_streaming_request_ends_with_its_one_response() -> None:
    collector = client.ResponseCollector([("0", "a")], streaming=False)
    collector.add("0", _result("0", "a and more"), None)
    assert collector.pending() == []
    assert collector.close()[0].text == "a and more"


def test_errors_are_reported_with_their_request() -> None:
    collector = client.ResponseCollector([("0", "a"), ("1", "b"), ("2", "c")], streaming=True)
    collector.add("1", None, "LoRA feature is not enabled.")
    collector.add("0", _result("0", "ok", "stop"), None)
    collector.add(None, None, "error without an id")  # only request 2 is open: it is its error
    outcomes = {o.request_id: o for o in collector.close()}
    assert outcomes["0"].ok
    assert (outcomes["1"].ok, outcomes["1"].prompt, outcomes["1"].error) == (False, "b", "LoRA feature is not enabled.")
    assert (outcomes["2"].ok, outcomes["2"].error) == (False, "error without an id")


def test_requests_left_open_when_the_stream_ends_fail() -> None:
    collector = client.ResponseCollector([("0", "a"), ("1", "b")], streaming=True)
    collector.add("0", _result("0", "partial", "None"), None)
    collector.add(None, None, "some error")  # two requests open: cannot tell whose
    outcomes = collector.close()
    assert not any(o.ok for o in outcomes)
    assert all("some error" in (o.error or "") for o in outcomes)


# --------------------------------------------------------------------------- results


def test_write_results_one_block_per_prompt(tmp_path: Path) -> None:
    outcomes = [
        client.RequestOutcome(
            "0", "Hello, my name is", text=" Ann.\nNice to meet you.", finish_reason="stop", done=True
        ),
        client.RequestOutcome("1", "Bad prompt", error="LoRA feature is not enabled.", done=True),
    ]
    path = tmp_path / "results.txt"
    client.write_results(path, outcomes)
    assert path.read_text(encoding="utf-8") == (
        "=== request 0 ===\nPrompt:\nHello, my name is\nOutput:\n Ann.\nNice to meet you.\n"
        "\n"
        "=== request 1 ===\nPrompt:\nBad prompt\nError:\nLoRA feature is not enabled.\n"
    )
    assert client.summary(outcomes, path) == f"2 requests: 1 succeeded, 1 failed; results written to {path}"
