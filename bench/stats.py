"""One run's records to the figures vLLM's serving benchmark reports, under the same key names,
so our own clients' results and `vllm bench serve`'s can share one table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bench.loadgen import RunResult

PERCENTILES = (50, 99)


def percentile(values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), without numpy."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _metric(result: dict[str, Any], name: str, seconds: Sequence[float]) -> None:
    """mean, median and percentiles in ms; None when nothing was measured (e.g. TTFT without streaming)."""
    ms = [value * 1000 for value in seconds]
    result[f"mean_{name}_ms"] = statistics.fmean(ms) if ms else None
    result[f"median_{name}_ms"] = statistics.median(ms) if ms else None
    for p in PERCENTILES:
        result[f"p{p}_{name}_ms"] = percentile(ms, p) if ms else None


def summarize(run: RunResult) -> dict[str, Any]:
    ok = [r for r in run.records if r.ok]
    failed = [r for r in run.records if not r.ok]
    output_tokens = sum(r.output_tokens for r in ok)
    chunks = sum(r.chunks for r in ok)
    wall = run.wall_s or 1e-9
    result: dict[str, Any] = {
        "duration": run.wall_s,
        "completed": len(ok),
        "failed": len(failed),
        "total_output_tokens": output_tokens,
        "request_throughput": len(ok) / wall,
        "output_throughput": output_tokens / wall,
        "chunks": chunks,
        "chunks_per_s": chunks / wall,
        "bytes_per_chunk": sum(r.payload_bytes for r in ok) / chunks if chunks else 0.0,
        "peak_in_flight": run.peak_in_flight,
        "first_errors": sorted({r.error or "" for r in failed})[:3],
    }
    _metric(result, "ttft", [r.ttft for r in ok if r.ttft is not None])
    _metric(result, "itl", [gap for r in ok for gap in r.itls])
    _metric(
        result,
        "tpot",
        [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.ttft is not None and r.output_tokens > 1],
    )
    _metric(result, "e2el", [r.latency for r in ok])
    return result
