"""Sampling parameters from a request, checked before they reach the engine.

vLLM validates parameter types inside its engine process, where a bad value
can wedge the engine; here every field is converted (strings such as "0.1",
"100", "false" included) and checked up front, and errors name the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import msgspec
from vllm_backend.compat import CLIENT_ERRORS, STRUCTURED_FIELD, RequestOutputKind, SamplingParams, StructuredParams

# Keys that configure the request rather than sampling.
_STRUCTURED_KEYS = ("structured_outputs", "guided_decoding")
_LORA_KEY = "lora_name"
# Fields the backend owns: a client may not set them.
_RESERVED = {"output_kind"}
_FIELDS = set(SamplingParams.__struct_fields__) - _RESERVED
_NOTHING: Mapping[str, Any] = MappingProxyType({})


class SamplingError(ValueError):
    """A sampling parameter the engine would reject; the message names the field."""


@dataclass(frozen=True)
class ParsedSampling:
    params: SamplingParams
    lora_name: str | None


def _loads_object(raw: str | bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise SamplingError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SamplingError(f"{what} must be a JSON object")
    return value


def _structured_outputs(raw: Any) -> Any:
    spec = _loads_object(raw, "structured_outputs") if isinstance(raw, (str, bytes)) else raw
    if not isinstance(spec, dict):
        raise SamplingError("structured_outputs must be a JSON object")
    try:
        return msgspec.convert(spec, StructuredParams, strict=False)
    except (msgspec.ValidationError, *CLIENT_ERRORS) as exc:
        raise SamplingError(f"structured_outputs: {exc}") from None


def parse_sampling(raw: dict[str, Any], stream: bool, implied: Mapping[str, Any] = _NOTHING) -> ParsedSampling:
    """Build SamplingParams from a JSON object of SamplingParams fields. `implied` fills fields the request leaves
    unset before SamplingParams is built, since it derives others from them then (with `prompt_logprobs`, vLLM
    skips reading the prefix cache, whose tokens would get no logprobs)."""
    fields = dict(raw)
    for key, value in implied.items():
        if fields.get(key) is None:
            fields[key] = value
    lora_name = fields.pop(_LORA_KEY, None)
    structured = None
    for key in _STRUCTURED_KEYS:
        if key in fields:
            structured = _structured_outputs(fields.pop(key))
    unknown = sorted(set(fields) - _FIELDS)
    if unknown:
        raise SamplingError(f"unknown sampling parameter(s): {', '.join(unknown)}")
    try:
        params = msgspec.convert(fields, SamplingParams, strict=False)
    except msgspec.ValidationError as exc:
        raise SamplingError(f"invalid sampling parameter: {exc}") from None
    except CLIENT_ERRORS as exc:
        raise SamplingError(str(exc)) from None
    if structured is not None:
        setattr(params, STRUCTURED_FIELD, structured)  # the field's name depends on the release
    params.output_kind = RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY
    return ParsedSampling(params=params, lora_name=str(lora_name) if lora_name is not None else None)


def sampling_from_json(
    raw: str | bytes | None, fallback: str | None, stream: bool, implied: Mapping[str, Any] = _NOTHING
) -> ParsedSampling:
    """The tensor wins; without it, the request's Triton parameters are the sampling parameters."""
    if raw is not None:
        return parse_sampling(_loads_object(raw, "sampling_parameters"), stream, implied)
    return parse_sampling(_loads_object(fallback or "{}", "request parameters"), stream, implied)
