"""The model's config.pbtxt parameters (string values; "true" compared case-insensitively)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _value(config: dict[str, Any], key: str) -> str | None:
    entry = config.get("parameters", {}).get(key)
    if entry is None:
        return None
    return str(entry.get("string_value", "")).strip()


def _flag(config: dict[str, Any], key: str, default: bool = False) -> bool:
    value = _value(config, key)
    return default if value is None else value.lower() == "true"


# A cap on streamed responses a second in all (relay.Pacer), off by default: a request already merges what the
# engine made while its previous response was in flight (relay.Handover), so it merges only when the path is
# behind. A fixed rate held every stream to `running / rate` seconds a chunk whatever the card did (128 ms at
# 256 streams on an H100). The local stack sets 2,000: on two cores shared with the engine, the stub, Triton and
# the gateway carry about 1,800 a second before they hold the engine back (bench/README.md, part 3).
STREAM_RESPONSES_PER_S = 0.0
# Pacing starts above this many running requests; below, every token goes out as it comes.
STREAM_PACE_ABOVE = 32
# Threads that hand responses to Triton (vllm_backend.outbox), each request on one of them. One carries about
# 5,000 responses a second on an H100 host, so 256 streams of an 8B model get a chunk every 55 ms where the engine
# makes a token every 13 (bench/README.md, part 5). Four, with Triton's `thread-pool-size` at 8, brought that to
# 40 ms but cost the 1B shape a third of its tok/s at 512 streams (one run each): more threads fight the engine's
# output handling for the stub's GIL. So one, until a profile says where the stub's time goes.
RESPONSE_SENDER_THREADS = 1


def _number(config: dict[str, Any], key: str, default: float, allow_zero: bool) -> float:
    raw = _value(config, key)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"parameter {key} must be a number, got {raw!r}") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"parameter {key} must be {'non-negative' if allow_zero else 'positive'}, got {raw!r}")
    return value


def _positive_float(config: dict[str, Any], key: str, default: float) -> float:
    return _number(config, key, default, allow_zero=False)


def _non_negative(config: dict[str, Any], key: str, default: float) -> float:
    return _number(config, key, default, allow_zero=True)


@dataclass(frozen=True)
class BackendParams:
    report_custom_metrics: bool = False
    # Ours: with the custom metrics, the one histogram observed per token (a round trip to Triton each).
    report_time_per_output_token: bool = True
    health_check: bool = False
    # Ours: seconds between engine health checks, and restarting a dead engine instead of unloading the model.
    health_check_interval_s: float = 1.0
    restart_engine: bool = False
    restart_max_backoff_s: float = 60.0
    # Ours: seconds between asking Triton whether a request was cancelled. Each question is a round trip to
    # the Triton process, so the pace sets both how soon a cancelled request stops and what watching costs.
    cancel_check_interval_s: float = 0.5
    # Ours: above `stream_pace_above` running requests, streamed outputs leave on a shared tick that keeps all
    # of them to about `stream_responses_per_s` responses a second, several tokens per response
    # (vllm_backend.relay.Pacer); 0 (the default) turns it off.
    stream_responses_per_s: float = STREAM_RESPONSES_PER_S
    stream_pace_above: int = STREAM_PACE_ABOVE
    # Ours: threads that hand responses to Triton; a request's responses all go through one of them.
    response_sender_threads: int = RESPONSE_SENDER_THREADS

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "BackendParams":
        return cls(
            report_custom_metrics=_flag(config, "REPORT_CUSTOM_METRICS"),
            report_time_per_output_token=_flag(config, "REPORT_TIME_PER_OUTPUT_TOKEN", default=True),
            health_check=_flag(config, "ENABLE_VLLM_HEALTH_CHECK"),
            health_check_interval_s=_positive_float(config, "VLLM_HEALTH_CHECK_INTERVAL_S", 1.0),
            restart_engine=_flag(config, "RESTART_UNHEALTHY_ENGINE"),
            restart_max_backoff_s=_positive_float(config, "RESTART_MAX_BACKOFF_S", 60.0),
            cancel_check_interval_s=_positive_float(config, "CANCEL_CHECK_INTERVAL_S", 0.5),
            stream_responses_per_s=_non_negative(config, "STREAM_RESPONSES_PER_S", STREAM_RESPONSES_PER_S),
            stream_pace_above=int(_non_negative(config, "STREAM_PACE_ABOVE", STREAM_PACE_ABOVE)),
            response_sender_threads=int(_positive_float(config, "RESPONSE_SENDER_THREADS", RESPONSE_SENDER_THREADS)),
        )
