"""Backend requests to Triton's gRPC protobuf messages and responses back, without any I/O.

Working on the protobuf messages directly (rather than through tritonclient's
InferInput/InferResult wrappers) keeps numpy off the per-token path and lets the
gateway ask for Triton's empty final response, which marks the end of a stream.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from gateway.core.upstream import GenerateChunk, GenerateRequest, TokenizerAnswer, TokenizerCall
from gateway.errors import bad_request

_LEN = struct.Struct("<I")

# Outputs the gateway always asks the backend for.
_RETURN_FLAGS = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")


def _add_input(request: pb.ModelInferRequest, name: str, datatype: str, raw: bytes, count: int = 1) -> None:
    tensor = request.inputs.add()
    tensor.name = name
    tensor.datatype = datatype
    tensor.shape.append(count)
    request.raw_input_contents.append(raw)


def _bytes_element(value: str) -> bytes:
    try:
        data = value.encode()
    except UnicodeEncodeError:  # JSON may escape half of a UTF-16 pair ("\\ud800"), which no UTF-8 text can carry
        raise bad_request("The request contains text that is not valid Unicode (an unpaired surrogate).") from None
    return _LEN.pack(len(data)) + data


def _add_string(request: pb.ModelInferRequest, name: str, value: str) -> None:
    _add_input(request, name, "BYTES", _bytes_element(value))


def _add_bool(request: pb.ModelInferRequest, name: str, value: bool) -> None:
    _add_input(request, name, "BOOL", b"\x01" if value else b"\x00")


def _add_prompt(message: pb.ModelInferRequest, request: GenerateRequest | TokenizerCall) -> None:
    """The prompt in one of its three forms: chat messages, token ids, or text."""
    if request.messages is not None:
        _add_string(message, "messages", json.dumps(request.messages, ensure_ascii=False))
        if request.chat_template_kwargs:
            _add_string(message, "chat_template_kwargs", json.dumps(request.chat_template_kwargs))
    elif request.prompt_token_ids is not None:
        ids = request.prompt_token_ids
        _add_input(message, "prompt_token_ids", "INT32", struct.pack(f"<{len(ids)}i", *ids), len(ids))
    else:
        _add_string(message, "text_input", request.text_input or "")


def encode_request(request: GenerateRequest) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name=request.model, id=request.request_id)
    _add_prompt(message, request)
    _add_bool(message, "stream", request.stream)
    _add_bool(message, "exclude_input_in_output", True)
    for flag in _RETURN_FLAGS:
        _add_bool(message, flag, True)
    if "logprobs" in request.sampling:
        _add_bool(message, "return_logprobs", True)
    if "prompt_logprobs" in request.sampling:
        _add_bool(message, "return_prompt_logprobs", True)
    if request.stream and request.sparse_outputs:
        _add_bool(message, "sparse_outputs", True)
    _add_string(message, "sampling_parameters", json.dumps(request.sampling))
    message.parameters["triton_enable_empty_final_response"].bool_param = True
    return message


def decode_bytes(raw: bytes) -> list[str]:
    """Triton's BYTES layout: each element is a little-endian uint32 length, then the bytes."""
    if len(raw) >= 4 and _LEN.unpack_from(raw)[0] + 4 == len(raw):  # one element: one token of one sequence
        return [raw[4:].decode("utf-8", errors="replace")]
    items, offset, end = [], 0, len(raw)
    while offset < end:
        (length,) = _LEN.unpack_from(raw, offset)
        offset += 4
        items.append(raw[offset : offset + length].decode("utf-8", errors="replace"))
        offset += length
    return items


def _decode_uint32(raw: bytes) -> list[int]:
    if len(raw) == 4:
        return [_LEN.unpack(raw)[0]]
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


_DECODERS = {"BYTES": decode_bytes, "UINT32": _decode_uint32}


def decode_response(response: pb.ModelInferResponse) -> GenerateChunk:
    outputs: dict[str, Any] = {}
    for tensor, raw in zip(response.outputs, response.raw_output_contents):
        decoder = _DECODERS.get(tensor.datatype)
        if decoder is not None:
            outputs[tensor.name] = decoder(raw)
    final_param = response.parameters.get("triton_final_response")
    input_tokens = outputs.get("num_input_tokens")
    prompt_logprobs = outputs.get("prompt_logprobs")
    return GenerateChunk(
        outputs.get("text_output", []),
        outputs.get("finish_reason", []),
        input_tokens[0] if input_tokens else None,
        outputs.get("num_output_tokens", []),
        final_param is not None and final_param.bool_param,
        response.id,
        outputs.get("logprobs", []),
        prompt_logprobs[0] if prompt_logprobs and prompt_logprobs[0] != "null" else None,
    )


def encode_tokenizer_call(call: TokenizerCall) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name=call.model, model_version=call.model_version, id=call.request_id)
    _add_prompt(message, call)
    _add_bool(message, "tokenize_only", True)
    if call.add_special_tokens is not None:
        _add_bool(message, "add_special_tokens", call.add_special_tokens)
    if call.return_token_strs:
        _add_bool(message, "return_token_strs", True)
    return message


def decode_tokenizer_answer(response: pb.ModelInferResponse) -> TokenizerAnswer | None:
    """The backend's one answer to a tokenize-only request; None for a response without it (an empty final one)."""
    raws = {tensor.name: raw for tensor, raw in zip(response.outputs, response.raw_output_contents)}
    if "max_model_len" not in raws:
        return None
    ids = raws.get("token_ids", b"")
    strs = raws.get("token_strs")
    return TokenizerAnswer(
        text="".join(decode_bytes(raws.get("text_output", b""))),
        token_ids=list(struct.unpack(f"<{len(ids) // 4}i", ids)),
        max_model_len=_decode_uint32(raws["max_model_len"])[0],
        token_strs=None if strs is None else decode_bytes(strs),
    )
