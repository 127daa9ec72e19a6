"""Every vLLM name the backend may use, as plain data, with the alternatives each vLLM release offers.

One table serves two readers: `compat` probes it against the installed vLLM (imports, `hasattr`,
signatures) to pick, per feature, the first alternative that is there; `scripts/compat_check.py` reads
a release's sources with `ast` and says, without importing anything, whether each feature has an
alternative in that release. Neither parses version strings. This module imports nothing from vLLM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Name:
    """`module.attr` exists; with `member`, the object has that attribute (method, field, class
    attribute or `self.<member>` set in a method); with `param`, the member is a callable taking a
    parameter of that name."""

    module: str
    attr: str
    member: str | None = None
    param: str | None = None

    def __str__(self) -> str:
        text = f"{self.module}.{self.attr}"
        if self.member:
            text += f".{self.member}"
        if self.param:
            text += f"({self.param}=)"
        return text


@dataclass(frozen=True)
class Alternative:
    """One way a release provides a feature: usable when all its names exist."""

    key: str
    names: tuple[Name, ...] = ()


@dataclass(frozen=True)
class Feature:
    """A difference between releases. `required`: without any alternative the backend cannot run."""

    name: str
    alternatives: tuple[Alternative, ...]
    required: bool = True
    doc: str = ""


def _n(path: str, member: str | None = None, param: str | None = None) -> Name:
    module, _, attr = path.rpartition(".")
    return Name(module, attr, member, param)


_ASYNC_LLM = "vllm.v1.engine.async_llm.AsyncLLM"
_ENGINE_API = tuple(
    _n(_ASYNC_LLM, member)
    for member in ("generate", "abort", "check_health", "errored", "shutdown", "get_tokenizer", "model_config")
)
_STATS = "vllm.v1.metrics.stats"

FEATURES: tuple[Feature, ...] = (
    Feature(
        "engine",
        (
            # The engine takes our stat logger at construction, from the configuration the backend built (so that
            # it can log the limits it resolved); older releases build it inside from_engine_args.
            Alternative("AsyncLLM.from_vllm_config", (
                _n(_ASYNC_LLM, "from_vllm_config", "stat_loggers"),
                _n(_ASYNC_LLM, "from_vllm_config", "usage_context"),
                *_ENGINE_API,
            )),
            Alternative("AsyncLLM.from_engine_args", (_n(_ASYNC_LLM, "from_engine_args", "stat_loggers"), *_ENGINE_API)),
            Alternative("AsyncLLMEngine.from_engine_args", (
                _n("vllm.engine.async_llm_engine.AsyncLLMEngine", "from_engine_args", "stat_loggers"),
            )),
        ),
        doc="the engine class and its constructor",
    ),
    Feature(
        "server_usage_context",
        (
            Alternative("OPENAI_API_SERVER", (
                _n("vllm.usage.usage_lib.UsageContext", "OPENAI_API_SERVER"),
                _n("vllm.engine.arg_utils.EngineArgs", "create_engine_config", "usage_context"),
            )),
        ),
        doc="the usage context `vllm serve` builds its engine with: its batch limits for the card",
    ),
    Feature("engine_args", (Alternative("AsyncEngineArgs", (_n("vllm.engine.arg_utils.AsyncEngineArgs"),)),)),
    Feature(
        "is_sleeping",
        (Alternative("is_sleeping", (_n(_ASYNC_LLM, "is_sleeping"),)), Alternative("none")),
        required=False,
        doc="a cheap engine call the health check awaits (else check_health alone)",
    ),
    Feature(
        "envs_cache",
        (Alternative("enable_envs_cache", (_n("vllm.envs.enable_envs_cache"),)), Alternative("none")),
        required=False,
        doc="environment variables read once: vLLM's output path reads one per token otherwise",
    ),
    Feature(
        "token_prompt",
        (
            # 0.32-era: an engine input already rendered, taken on the calling loop.
            Alternative("tokens_input", (_n("vllm.inputs.tokens_input"),)),
            # Older: a prompt dict of token ids (goes through the input processor).
            Alternative("TokensPrompt", (_n("vllm.inputs.TokensPrompt"),)),
        ),
        doc="how a tokenized prompt is handed over",
    ),
    Feature(
        "stat_logger",
        (
            Alternative("v1 StatLoggerBase", (
                _n("vllm.v1.metrics.loggers.StatLoggerBase", "record"),
                _n("vllm.v1.metrics.loggers.StatLoggerBase", "log_engine_initialized"),
            )),
        ),
        doc="the stat-logger interface (record()'s parameters are matched by name at run time)",
    ),
    Feature(
        "sampling",
        (
            Alternative("SamplingParams", (
                _n("vllm.sampling_params.SamplingParams", "output_kind"),
                _n("vllm.sampling_params.RequestOutputKind", "DELTA"),
                _n("vllm.sampling_params.RequestOutputKind", "FINAL_ONLY"),
            )),
        ),
    ),
    Feature(
        "structured_outputs",
        (
            Alternative("structured_outputs", (
                _n("vllm.sampling_params.StructuredOutputsParams"),
                _n("vllm.sampling_params.SamplingParams", "structured_outputs"),
            )),
            Alternative("guided_decoding", (
                _n("vllm.sampling_params.GuidedDecodingParams"),
                _n("vllm.sampling_params.SamplingParams", "guided_decoding"),
            )),
        ),
        doc="the sampling field and class of structured outputs",
    ),
    Feature(
        "multimodal_check",
        (
            Alternative("config.model.ModelConfig", (_n("vllm.config.model.ModelConfig", "is_multimodal_model"),)),
            Alternative("config.ModelConfig", (_n("vllm.config.ModelConfig", "is_multimodal_model"),)),
            Alternative("none"),
        ),
        required=False,
        doc="whether the model takes images: a text model's are refused before the engine (0.20 died of them)",
    ),
    Feature(
        "prompt_logprobs",
        (
            Alternative("prompt_logprobs", (
                _n("vllm.sampling_params.SamplingParams", "prompt_logprobs"),
                _n("vllm.outputs.RequestOutput", "prompt_logprobs"),
            )),
            Alternative("none"),
        ),
        required=False,
        doc="the prompt's logprobs, asked in the sampling parameters and read from the request's output",
    ),
    Feature(
        "lora",
        (
            Alternative("LoRARequest", (
                _n("vllm.lora.request.LoRARequest", "lora_name"),
                _n("vllm.lora.request.LoRARequest", "lora_int_id"),
                _n("vllm.lora.request.LoRARequest", "lora_path"),
            )),
        ),
    ),
    Feature(
        "max_token_id",
        (
            # vLLM's own tokenizer interface says it, added tokens included.
            Alternative("TokenizerLike.max_token_id", (_n("vllm.tokenizers.protocol.TokenizerLike", "max_token_id"),)),
            # Older: the engine hands out Hugging Face's tokenizer, whose length counts the added tokens.
            Alternative("len(tokenizer)"),
        ),
        required=False,
        doc="the largest token id of the model's vocabulary (token ids above it are refused)",
    ),
    Feature(
        "client_error",
        (Alternative("VLLMClientError", (_n("vllm.exceptions.VLLMClientError"),)), Alternative("none")),
        required=False,
        doc="vLLM's exception for errors caused by the request",
    ),
    Feature(
        "itl_field",
        (
            Alternative("inter_token_latencies_iter", (_n(f"{_STATS}.IterationStats", "inter_token_latencies_iter"),)),
            Alternative("time_per_output_tokens_iter", (_n(f"{_STATS}.IterationStats", "time_per_output_tokens_iter"),)),
        ),
        required=False,
        doc="metric: inter-token latencies of an iteration",
    ),
    Feature(
        "kv_usage_field",
        (
            Alternative("kv_cache_usage", (_n(f"{_STATS}.SchedulerStats", "kv_cache_usage"),)),
            Alternative("gpu_cache_usage", (_n(f"{_STATS}.SchedulerStats", "gpu_cache_usage"),)),
        ),
        required=False,
        doc="metric: KV-cache usage",
    ),
    Feature(
        "stat_fields",
        (
            Alternative("IterationStats", tuple(
                _n(f"{_STATS}.{cls}", member)
                for cls, members in (
                    ("IterationStats", ("num_prompt_tokens", "num_generation_tokens", "time_to_first_tokens_iter",
                                        "n_params_iter", "finished_requests")),
                    ("FinishedRequestStats", ("e2e_latency", "num_prompt_tokens", "num_generation_tokens")),
                    ("SchedulerStats", ("num_running_reqs", "num_waiting_reqs")),
                )
                for member in members
            )),
        ),
        required=False,
        doc="metric: the statistics fields read for the vllm: families",
    ),
)  # fmt: skip

FEATURE_BY_NAME = {feature.name: feature for feature in FEATURES}


@dataclass(frozen=True)
class Choice:
    """What a probe found for one feature: the chosen alternative (None: nothing fits) and what each lacked."""

    feature: Feature
    alternative: Alternative | None
    missing: dict[str, list[Name]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.alternative is not None or not self.feature.required


def choose(feature: Feature, exists: Callable[[Name], bool]) -> Choice:
    """The first alternative whose names all exist, by the given probe (runtime import or static ast)."""
    missing: dict[str, list[Name]] = {}
    for alternative in feature.alternatives:
        absent = [name for name in alternative.names if not exists(name)]
        if not absent:
            return Choice(feature, alternative, missing)
        missing[alternative.key] = absent
    return Choice(feature, None, missing)


def choose_all(exists: Callable[[Name], bool], features: Sequence[Feature] = FEATURES) -> list[Choice]:
    return [choose(feature, exists) for feature in features]
