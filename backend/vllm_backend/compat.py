"""The backend's only door to vLLM: what differs between releases is chosen here, by feature detection.

Each feature of `compat_names.FEATURES` is probed against the installed vLLM (imports, attributes,
signatures; never its version string) and the first alternative that is present wins. The rest of the
backend imports vLLM names from this module only. A release that lacks a required feature fails the
model's load with the names it lacks, instead of an ImportError deep in a request.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from vllm_backend.compat_names import FEATURES, Choice, Name, choose_all

_MISSING = object()


def _import_attr(module: str, attr: str) -> Any:
    try:
        return getattr(importlib.import_module(module), attr, _MISSING)
    except ImportError:
        return _MISSING


def _code_names(cls: type) -> set[str]:
    """Attribute names the class's own functions use: `self.x = ...` in __init__ makes `x` an
    attribute that only instances have."""
    names: set[str] = set()
    for klass in getattr(cls, "__mro__", (cls,)):
        for value in vars(klass).values():
            function = getattr(value, "fget", value)
            code = getattr(function, "__code__", None)
            if code is not None:
                names.update(code.co_names)
    return names


def has_member(obj: Any, member: str) -> bool:
    """Class attribute, method, property, dataclass / msgspec field, or attribute set on instances."""
    if hasattr(obj, member):
        return True
    for klass in getattr(obj, "__mro__", ()):
        if member in getattr(klass, "__annotations__", {}) or member in getattr(klass, "__struct_fields__", ()):
            return True
    return isinstance(obj, type) and member in _code_names(obj)


def takes_param(function: Any, param: str) -> bool:
    try:
        return param in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def runtime_exists(name: Name) -> bool:
    """The probe against the installed vLLM."""
    obj = _import_attr(name.module, name.attr)
    if obj is _MISSING:
        return False
    if name.member is None:
        return True
    if not has_member(obj, name.member):
        return False
    return name.param is None or takes_param(getattr(obj, name.member, None), name.param)


def check_choices(choices: list[Choice]) -> dict[str, Choice]:
    """Choices by feature name; raises ImportError naming what a required feature lacks."""
    failed = [choice for choice in choices if not choice.ok]
    if failed:
        lines = []
        for choice in failed:
            tried = "; ".join(f"{key}: {', '.join(map(str, names))}" for key, names in choice.missing.items())
            lines.append(f"{choice.feature.name} ({choice.feature.doc or 'required'}): missing {tried}")
        raise ImportError("this vLLM release lacks what the backend needs:\n  " + "\n  ".join(lines))
    return {choice.feature.name: choice for choice in choices}


CHOICES = check_choices(choose_all(runtime_exists, FEATURES))


def chosen(feature: str) -> str | None:
    """The key of the alternative picked for a feature (None: an optional feature with none)."""
    alternative = CHOICES[feature].alternative
    return None if alternative is None or not alternative.names else alternative.key


def describe() -> str:
    """For the load log: the release (read, never used to choose) and what was chosen."""
    version = getattr(importlib.import_module("vllm"), "__version__", "unknown")
    picked = ", ".join(f"{name}={chosen(name) or 'none'}" for name in CHOICES)
    return f"vLLM {version} from {importlib.import_module('vllm').__file__}; compat: {picked}"


def _get(path: str) -> Any:
    module, _, attr = path.rpartition(".")
    return _import_attr(module, attr)


# ---- names the backend uses ------------------------------------------------------------------------

AsyncEngineArgs = _get("vllm.engine.arg_utils.AsyncEngineArgs")
SamplingParams = _get("vllm.sampling_params.SamplingParams")
RequestOutputKind = _get("vllm.sampling_params.RequestOutputKind")
LoRARequest = _get("vllm.lora.request.LoRARequest")
StatLoggerBase = _get("vllm.v1.metrics.loggers.StatLoggerBase")

if chosen("structured_outputs") == "structured_outputs":
    STRUCTURED_FIELD = "structured_outputs"
    StructuredParams = _get("vllm.sampling_params.StructuredOutputsParams")
else:
    STRUCTURED_FIELD = "guided_decoding"
    StructuredParams = _get("vllm.sampling_params.GuidedDecodingParams")

_client_error = _get("vllm.exceptions.VLLMClientError") if chosen("client_error") else None
# Errors caused by the request itself; older releases raise ValueError only.
CLIENT_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError) + ((_client_error,) if _client_error else ())

# Whether the engine can return the prompt's logprobs (the `return_prompt_logprobs` input is refused otherwise).
PROMPT_LOGPROBS = chosen("prompt_logprobs") is not None

ITL_FIELD = chosen("itl_field") or "inter_token_latencies_iter"
KV_USAGE_FIELD = chosen("kv_usage_field") or "kv_cache_usage"


# ---- the engine ------------------------------------------------------------------------------------


def engine_class() -> Any:
    if chosen("engine") == "AsyncLLMEngine.from_engine_args":
        return _get("vllm.engine.async_llm_engine.AsyncLLMEngine")
    return _get("vllm.v1.engine.async_llm.AsyncLLM")


# `vllm serve` builds its engine under this usage context, and vLLM picks its batch limits by it and by the card:
# max_num_seqs 1024 and max_num_batched_tokens 8192 on an 80 GB H100 (0.25), where the engine's own default
# context leaves 128 sequences. The backend builds its engine the same way, so that the same model.json gives
# the same engine as `vllm serve` with the same arguments; values that model.json sets still win.
SERVER_USAGE_CONTEXT = _get("vllm.usage.usage_lib.UsageContext").OPENAI_API_SERVER


def engine_config(engine_args: dict[str, Any]) -> Any:
    """The engine's configuration for model.json's arguments, resolved as `vllm serve` resolves it."""
    return AsyncEngineArgs(**engine_args).create_engine_config(usage_context=SERVER_USAGE_CONTEXT)


def batch_limits(config: Any) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of a resolved configuration."""
    scheduler = config.scheduler_config
    return int(scheduler.max_num_seqs), int(scheduler.max_num_batched_tokens)


def start_engine(engine_args: dict[str, Any], stat_loggers: list[Callable[..., Any]] | None) -> tuple[Any, Any]:
    """A started engine for model.json's arguments, reporting to `stat_loggers`, and its resolved configuration."""
    cls = engine_class()
    config = engine_config(engine_args)
    if chosen("engine") == "AsyncLLM.from_vllm_config":
        engine = cls.from_vllm_config(config, usage_context=SERVER_USAGE_CONTEXT, stat_loggers=stat_loggers)
    else:  # builds the same configuration again inside
        engine = cls.from_engine_args(
            AsyncEngineArgs(**engine_args), usage_context=SERVER_USAGE_CONTEXT, stat_loggers=stat_loggers
        )
    if chosen("envs_cache"):  # as vLLM's engine process does once started: the environment is set by now
        _get("vllm.envs.enable_envs_cache")()
    return engine, config


async def engine_tokenizer(engine: Any) -> Any:
    """`get_tokenizer` is a coroutine in older releases, a plain method in newer ones."""
    tokenizer = engine.get_tokenizer()
    return await tokenizer if inspect.isawaitable(tokenizer) else tokenizer


def max_token_id(tokenizer: Any) -> int:
    """The largest token id the model knows."""
    if chosen("max_token_id"):
        return int(tokenizer.max_token_id)
    return len(tokenizer) - 1


async def engine_answers(engine: Any) -> None:
    """A cheap round trip to the engine's process (raises if it is dead)."""
    if chosen("is_sleeping"):
        await engine.is_sleeping()
    await engine.check_health()


# ---- prompts ---------------------------------------------------------------------------------------


def token_prompt(prompt_ids: list[int], text: str) -> Any:
    """A tokenized prompt as this release takes it."""
    if chosen("token_prompt") == "tokens_input":
        # Already rendered, so vLLM takes it on the calling loop, not through its renderer's thread.
        return _get("vllm.inputs.tokens_input")(prompt_ids, prompt=text)
    return {"prompt_token_ids": prompt_ids}


def takes_images(model_config: Any) -> bool:
    """Whether the served model takes images; True where this release cannot say (the engine then decides)."""
    if chosen("multimodal_check") is None:
        return True
    return bool(model_config.is_multimodal_model)


def multimodal_prompt(prompt_ids: list[int], data: dict[str, Any]) -> dict[str, Any]:
    """Token ids plus images: a prompt dict every release still processes."""
    return {"prompt_token_ids": prompt_ids, "multi_modal_data": data}


# ---- statistics ------------------------------------------------------------------------------------


def record_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """(scheduler_stats, iteration_stats) from a record() call, positional or by keyword; releases
    add parameters after these two (mm_cache_stats, engine_idx)."""
    scheduler = kwargs.get("scheduler_stats", args[0] if args else None)
    iteration = kwargs.get("iteration_stats", args[1] if len(args) > 1 else None)
    return scheduler, iteration
