"""The model's config.pbtxt parameters (string values; "true" compared case-insensitively)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _value(config: dict[str, Any], key: str) -> str | None:
    entry = config.get("parameters", {}).get(key)
    if entry is None:
        return None
    return str(entry.get("string_value", "")).strip()


def _flag(config: dict[str, Any], key: str) -> bool:
    return (_value(config, key) or "").lower() == "true"


def _positive_float(config: dict[str, Any], key: str, default: float) -> float:
    raw = _value(config, key)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"parameter {key} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"parameter {key} must be positive, got {raw!r}")
    return value


@dataclass(frozen=True)
class BackendParams:
    report_custom_metrics: bool = False
    health_check: bool = False
    # Ours: seconds between engine health checks, and restarting a dead engine instead of unloading the model.
    health_check_interval_s: float = 1.0
    restart_engine: bool = False
    restart_max_backoff_s: float = 60.0
    # Ours: seconds between asking Triton whether a request was cancelled. Each question is a round trip to
    # the Triton process, so the pace sets both how soon a cancelled request stops and what watching costs.
    cancel_check_interval_s: float = 0.5

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "BackendParams":
        return cls(
            report_custom_metrics=_flag(config, "REPORT_CUSTOM_METRICS"),
            health_check=_flag(config, "ENABLE_VLLM_HEALTH_CHECK"),
            health_check_interval_s=_positive_float(config, "VLLM_HEALTH_CHECK_INTERVAL_S", 1.0),
            restart_engine=_flag(config, "RESTART_UNHEALTHY_ENGINE"),
            restart_max_backoff_s=_positive_float(config, "RESTART_MAX_BACKOFF_S", 60.0),
            cancel_check_interval_s=_positive_float(config, "CANCEL_CHECK_INTERVAL_S", 0.5),
        )
