from __future__ import annotations

import json
import struct

from tritonclient.grpc import service_pb2 as pb

from gateway.core.triton_codec import (
    decode_bytes,
    decode_response,
    decode_tokenizer_answer,
    encode_request,
    encode_tokenizer_call,
)
from gateway.core.upstream import GenerateRequest, TokenizerCall


def _inputs(message: pb.ModelInferRequest) -> dict[str, tuple[str, bytes]]:
    return {t.name: (t.datatype, raw) for t, raw in zip(message.inputs, message.raw_input_contents)}


def test_completion_request_encoding() -> None:
    request = GenerateRequest(model="m", request_id="r1", sampling={"max_tokens": 3}, stream=True, text_input="héllo")
    message = encode_request(request)
    inputs = _inputs(message)
    assert message.model_name == "m" and message.id == "r1"
    assert decode_bytes(inputs["text_input"][1]) == ["héllo"]
    assert inputs["stream"] == ("BOOL", b"\x01")
    assert inputs["exclude_input_in_output"] == ("BOOL", b"\x01")
    assert json.loads(decode_bytes(inputs["sampling_parameters"][1])[0]) == {"max_tokens": 3}
    assert {"return_finish_reason", "return_num_input_tokens", "return_num_output_tokens"} <= inputs.keys()
    assert "messages" not in inputs
    assert inputs["sparse_outputs"] == ("BOOL", b"\x01")
    assert message.parameters["triton_enable_empty_final_response"].bool_param


def test_counts_in_every_response_for_continuous_usage_or_without_streaming() -> None:
    continuous = GenerateRequest(model="m", request_id="r", sampling={}, stream=True, sparse_outputs=False)
    assert "sparse_outputs" not in _inputs(encode_request(continuous))
    whole = GenerateRequest(model="m", request_id="r", sampling={}, stream=False)
    assert "sparse_outputs" not in _inputs(encode_request(whole))


def test_chat_request_sends_messages_not_text() -> None:
    messages = [{"role": "user", "content": "Hi"}]
    request = GenerateRequest(
        model="m", request_id="r", sampling={}, stream=False, messages=messages, chat_template_kwargs={"a": 1}
    )
    inputs = _inputs(encode_request(request))
    assert "text_input" not in inputs
    assert json.loads(decode_bytes(inputs["messages"][1])[0]) == messages
    assert json.loads(decode_bytes(inputs["chat_template_kwargs"][1])[0]) == {"a": 1}
    assert inputs["stream"] == ("BOOL", b"\x00")
    assert "sparse_outputs" not in inputs


def _bytes_tensor(values: list[str]) -> bytes:
    return b"".join(struct.pack("<I", len(v.encode())) + v.encode() for v in values)


def test_response_decoding() -> None:
    response = pb.ModelInferResponse()
    for name, datatype, raw in (
        ("text_output", "BYTES", _bytes_tensor(["a", "bc"])),
        ("finish_reason", "BYTES", _bytes_tensor(["None", "length"])),
        ("num_input_tokens", "UINT32", struct.pack("<I", 12)),
        ("num_output_tokens", "UINT32", struct.pack("<2I", 1, 2)),
    ):
        tensor = response.outputs.add()
        tensor.name, tensor.datatype = name, datatype
        response.raw_output_contents.append(raw)
    response.parameters["triton_final_response"].bool_param = True
    chunk = decode_response(response)
    assert chunk.texts == ["a", "bc"]
    assert chunk.finish_reasons == ["None", "length"]
    assert chunk.num_input_tokens == 12
    assert chunk.num_output_tokens == [1, 2]
    assert chunk.final


def test_empty_final_response() -> None:
    response = pb.ModelInferResponse()
    response.parameters["triton_final_response"].bool_param = True
    chunk = decode_response(response)
    assert chunk.final and chunk.texts == [] and chunk.num_input_tokens is None


def test_token_id_prompts_are_sent_as_int32() -> None:
    request = GenerateRequest(model="m", request_id="r", sampling={}, stream=False, prompt_token_ids=[1, 2, 70000])
    inputs = _inputs(encode_request(request))
    assert "text_input" not in inputs
    assert inputs["prompt_token_ids"] == ("INT32", struct.pack("<3i", 1, 2, 70000))


def test_tokenizer_call_encoding() -> None:
    call = TokenizerCall("m", "r", text_input="hi", add_special_tokens=False, return_token_strs=True, model_version="2")
    message = encode_tokenizer_call(call)
    inputs = _inputs(message)
    assert (message.model_name, message.model_version, message.id) == ("m", "2", "r")
    assert decode_bytes(inputs["text_input"][1]) == ["hi"]
    assert inputs["tokenize_only"] == ("BOOL", b"\x01")
    assert inputs["add_special_tokens"] == ("BOOL", b"\x00")
    assert inputs["return_token_strs"] == ("BOOL", b"\x01")
    assert not {"sampling_parameters", "stream", "return_finish_reason"} & inputs.keys()
    detokenize = _inputs(encode_tokenizer_call(TokenizerCall("m", "r", prompt_token_ids=[7, 2**31 - 1])))
    assert detokenize["prompt_token_ids"] == ("INT32", struct.pack("<2i", 7, 2**31 - 1))
    assert not {"add_special_tokens", "return_token_strs", "text_input"} & detokenize.keys()


def _response(outputs: list[tuple[str, str, bytes]]) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse()
    for name, datatype, raw in outputs:
        tensor = response.outputs.add()
        tensor.name, tensor.datatype = name, datatype
        response.raw_output_contents.append(raw)
    return response


def test_tokenizer_answer_decoding() -> None:
    answer = decode_tokenizer_answer(_response([
        ("text_output", "BYTES", _bytes_tensor(["Hi there"])),
        ("token_ids", "INT32", struct.pack("<3i", 1, 2, 49151)),
        ("max_model_len", "UINT32", struct.pack("<I", 2048)),
        ("token_strs", "BYTES", _bytes_tensor(["<s>", "Hi", "Ġthere"])),
    ]))  # fmt: skip
    assert answer is not None
    assert (answer.text, answer.token_ids, answer.max_model_len) == ("Hi there", [1, 2, 49151], 2048)
    assert answer.token_strs == ["<s>", "Hi", "Ġthere"]
    empty = decode_tokenizer_answer(_response([
        ("text_output", "BYTES", _bytes_tensor([""])),
        ("token_ids", "INT32", b""),
        ("max_model_len", "UINT32", struct.pack("<I", 8)),
    ]))  # fmt: skip
    assert empty is not None and (empty.text, empty.token_ids, empty.token_strs) == ("", [], None)
    assert decode_tokenizer_answer(pb.ModelInferResponse()) is None  # an empty final response
