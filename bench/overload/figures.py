"""What one overload run measured, judged and summed up from what the clients saw (no I/O here).

Each request must end complete (soak's rules: the exact token count, a well-formed stream ending in [DONE]) or
refused: 429 or 503 in OpenAI's error shape, with a Retry-After header. Anything else fails the run.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from bench.soak.outcomes import Exchange, Outcome, classify
from bench.stats import percentile

REFUSAL_TARGET_MS = 50.0  # issue 23: the excess is refused within 50 ms (p95)
LIVENESS_TARGET_MS = 500.0  # issue 23: /health/live stays under 0.5 s (p95) while saturated
REFUSED_STATUSES = (429, 503)


@dataclass
class Attempt:
    """One request of a burst, as its client saw it."""

    exchange: Exchange
    retry_after: str | None = None
    burst: int = 0
    lone: bool = False  # sent by the lone client, not by a burst


@dataclass(frozen=True)
class Judged:
    kind: str  # "complete", "refused", or what was wrong
    code: str = ""  # a refusal's error code (server_busy, rate_limit_exceeded, ...)


def judge(attempt: Attempt) -> Judged:
    exchange = attempt.exchange
    verdict = classify(exchange)
    if verdict.outcome is Outcome.COMPLETE:
        return Judged("complete")
    if verdict.outcome is Outcome.ERROR_STATUS and exchange.status in REFUSED_STATUSES:
        if not attempt.retry_after or not attempt.retry_after.isdigit():
            return Judged(f"{exchange.status} without Retry-After")
        return Judged("refused", str(json.loads(exchange.body)["error"].get("code")))
    return Judged(f"{verdict.outcome.value}: {verdict.detail}".rstrip(": "))


@dataclass
class Figures:
    """The run's figures, in milliseconds."""

    outcomes: Counter[str] = field(default_factory=Counter)
    refusal_codes: Counter[str] = field(default_factory=Counter)
    refusal_client_ms: list[float] = field(default_factory=list)  # the bursts' refused requests
    refusal_lone_ms: list[float] = field(default_factory=list)  # the lone client's, once a burst has arrived
    refusal_gateway_ms: list[float] = field(default_factory=list)  # from the gateway's access log
    complete_ms: list[float] = field(default_factory=list)
    liveness_ms: list[float] = field(default_factory=list)
    liveness_failures: int = 0

    @property
    def failures(self) -> dict[str, int]:
        return {kind: n for kind, n in self.outcomes.items() if kind not in ("complete", "refused")}


def figures(attempts: list[Attempt], liveness_s: list[float | None], gateway_refusals_s: list[float]) -> Figures:
    """`liveness_s`: each probe's latency, None for a probe that failed."""
    result = Figures()
    for attempt in attempts:
        judged = judge(attempt)
        result.outcomes[judged.kind] += 1
        ms = attempt.exchange.latency_s * 1000
        if judged.kind == "refused":
            result.refusal_codes[judged.code] += 1
            (result.refusal_lone_ms if attempt.lone else result.refusal_client_ms).append(ms)
        elif judged.kind == "complete":
            result.complete_ms.append(ms)
    result.liveness_ms = [s * 1000 for s in liveness_s if s is not None]
    result.liveness_failures = sum(1 for s in liveness_s if s is None)
    result.refusal_gateway_ms = [s * 1000 for s in gateway_refusals_s]
    return result


def gateway_refusal_durations(log_lines: list[str]) -> list[float]:
    """The in-gateway durations (the access log's `duration_s`, from the request's arrival in the app to its
    response) of the generation requests refused with 429 or 503."""
    durations = []
    for line in log_lines:
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(record, dict)
            and str(record.get("path", "")).startswith("/v1/")
            and record.get("status") in REFUSED_STATUSES
            and isinstance(record.get("duration_s"), (int, float))
        ):
            durations.append(float(record["duration_s"]))
    return durations


def _p(values: list[float], p: float) -> str:
    return f"{percentile(values, p):.1f}" if values else "-"


def table(result: Figures, setup: str) -> str:
    """The printed summary: outcomes, then latencies against the targets."""
    lines = [f"Overload: {setup}", ""]
    lines += ["| outcome | requests |", "|---|---|"]
    for kind, count in sorted(result.outcomes.items()):
        lines.append(f"| {kind} | {count} |")
    codes = ", ".join(f"{code} {n}" for code, n in sorted(result.refusal_codes.items())) or "-"
    lines += ["", f"Refusals by code: {codes}", ""]
    lines += ["| latency (ms) | n | p50 | p95 | p99 | max | target (p95) |", "|---|---|---|---|---|---|---|"]
    rows = [
        ("refusal, client side (bursts)", result.refusal_client_ms, REFUSAL_TARGET_MS),
        ("refusal, client side (a lone client while full)", result.refusal_lone_ms, REFUSAL_TARGET_MS),
        ("refusal, in the gateway", result.refusal_gateway_ms, REFUSAL_TARGET_MS),
        ("/health/live while saturated", result.liveness_ms, LIVENESS_TARGET_MS),
        ("completed requests", result.complete_ms, None),
    ]
    for name, values, target in rows:
        verdict = ""
        if target is not None and values:
            verdict = f"{target:.0f} ({'met' if percentile(values, 95) <= target else 'missed'})"
        maximum = f"{max(values):.1f}" if values else "-"
        lines.append(f"| {name} | {len(values)} | {_p(values, 50)} | {_p(values, 95)} | {_p(values, 99)} | "
                     f"{maximum} | {verdict} |")  # fmt: skip
    if result.liveness_failures:
        lines.append(f"\n{result.liveness_failures} liveness probes failed")
    return "\n".join(lines)
