"""Validate gateway JSON against OpenAI's published OpenAPI description.

Why this exists: the gateway claims OpenAI compatibility, so tests should check its objects against OpenAI's own
schemas (``components/schemas`` of ``/work/shared/spec/openai-openapi.yaml``) rather than against our own pydantic
models. Two adaptations make that spec usable with a JSON-Schema (draft 2020-12) validator:

* ``nullable: true`` (OpenAPI 3.0 form, still present in this 3.1 file) is ignored by JSON Schema, so every node
  carrying it is rewritten to ``anyOf: [<node>, {"type": "null"}]``; otherwise ``finish_reason: null`` or
  ``logprobs: null`` in valid chat stream chunks would be rejected.
* ``$ref: '#/components/schemas/...'`` is resolved with ``referencing``, the whole document being one resource.

Everything else (required, enum, type, additionalProperties, format) is checked as the spec states it.

Completion stream chunks: the spec has no schema for them; ``CreateCompletionResponse`` says streamed and
non-streamed objects "share the same shape". That schema, however, makes ``choices[].finish_reason`` a non-null
enum and ``usage`` a non-null object, while a stream necessarily sends ``finish_reason: null`` before the last
token and ``usage: null`` with ``stream_options.include_usage`` (as OpenAI does, and as the chat chunk schema
allows). ``validate_completion_chunk`` therefore uses ``CreateCompletionResponse`` with exactly those two fields
made nullable, mirroring ``CreateChatCompletionStreamResponse``.

Completion logprobs with ``echo``: the spec types ``token_logprobs`` items as numbers and ``top_logprobs`` items as
objects, yet the first echoed prompt token has no logprob (nothing precedes it), and OpenAI's own API, as vLLM's
server, sends ``null`` in both lists there. Those two item schemas are made nullable, in every completion schema;
nothing else is relaxed.
"""

from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(os.environ.get("OPENAI_SPEC_PATH", "/work/shared/spec/openai-openapi.yaml"))
_BASE_URI = "urn:openai-openapi"
# Not an OpenAI name: derived schema for completion stream chunks (see module docstring).
COMPLETION_CHUNK_SCHEMA = "x-gateway-CompletionStreamChunk"

__all__ = ["COMPLETION_CHUNK_SCHEMA", "SPEC_PATH", "ValidationError", "validate", "validate_completion_chunk"]


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [node, {"type": "null"}]}


def _rewrite_nullable(node: Any) -> Any:
    """Return ``node`` with every ``nullable: true`` schema turned into ``anyOf [schema, null]``, recursively."""
    if isinstance(node, list):
        return [_rewrite_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _rewrite_nullable(value) for key, value in node.items() if key != "nullable"}
    return _nullable(out) if node.get("nullable") is True else out


def _allow_echoed_first_token(response: dict[str, Any]) -> None:
    """Null items in ``token_logprobs`` and ``top_logprobs`` (see the module docstring)."""
    logprobs = response["properties"]["choices"]["items"]["properties"]["logprobs"]
    lists = next(option for option in logprobs["anyOf"] if option.get("type") == "object")["properties"]
    for name in ("token_logprobs", "top_logprobs"):
        lists[name]["items"] = _nullable(lists[name]["items"])


def _completion_chunk_schema(response: dict[str, Any]) -> dict[str, Any]:
    chunk = copy.deepcopy(response)
    chunk["description"] = "Derived by tests/openai_spec.py: CreateCompletionResponse as a stream chunk."
    choice = chunk["properties"]["choices"]["items"]
    choice["properties"]["finish_reason"] = _nullable(choice["properties"]["finish_reason"])
    chunk["properties"]["usage"] = _nullable(chunk["properties"]["usage"])
    return chunk


@lru_cache(maxsize=1)
def _spec() -> tuple[dict[str, Any], Registry]:
    """Load (once per process), rewrite and register the whole OpenAPI document."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with SPEC_PATH.open("rb") as handle:
        document = _rewrite_nullable(yaml.load(handle, Loader=loader))
    schemas = document["components"]["schemas"]
    _allow_echoed_first_token(schemas["CreateCompletionResponse"])
    schemas[COMPLETION_CHUNK_SCHEMA] = _completion_chunk_schema(schemas["CreateCompletionResponse"])
    registry = Registry().with_resource(_BASE_URI, DRAFT202012.create_resource(document))
    return document, registry


@lru_cache(maxsize=None)
def _validator(schema_name: str) -> Draft202012Validator:
    document, registry = _spec()
    if schema_name not in document["components"]["schemas"]:
        raise KeyError(f"{schema_name!r} is not under components/schemas in {SPEC_PATH}")
    return Draft202012Validator(
        {"$ref": f"{_BASE_URI}#/components/schemas/{schema_name}"},
        registry=registry,
        format_checker=Draft202012Validator.FORMAT_CHECKER,
    )


def validate(schema_name: str, instance: object) -> None:
    """Raise ``jsonschema.ValidationError`` if ``instance`` does not conform to ``components/schemas/<schema_name>``."""
    error = best_match(_validator(schema_name).iter_errors(instance))
    if error is not None:
        raise error


def validate_completion_chunk(instance: object) -> None:
    """Validate one ``/v1/completions`` stream chunk (``object: "text_completion"``); see the module docstring."""
    validate(COMPLETION_CHUNK_SCHEMA, instance)
