"""The PNG chart, when matplotlib is installed (`pip install -e '.[bench]'`); without it the JSON and
markdown reports are complete and the chart is skipped with a note."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.gpu_report import STAGES
from bench.report import ENDPOINTS

SERIES = (("A", "openai", "A gateway, completions"), ("A", "openai-chat", "A gateway, chat"),
          ("B", "triton-grpc", "B Triton gRPC"), ("C", "openai", "C vllm serve, completions"),
          ("C", "openai-chat", "C vllm serve, chat"))  # fmt: skip


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _series(runs: list[dict[str, Any]], system: str, backend: str, key: str) -> tuple[list[int], list[float]]:
    """One point per concurrency: the median of its rounds."""
    by_c: dict[int, list[float]] = {}
    for r in runs:
        if r["system"] == system and r["backend"] == backend:
            by_c.setdefault(r["max_concurrency"], []).append(r.get(key) or 0.0)
    xs = sorted(by_c)
    return xs, [statistics.median(by_c[c]) for c in xs]


def _concurrency_axis(ax: Any, runs: list[dict[str, Any]], title: str) -> None:
    import matplotlib.ticker

    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["max_concurrency"] for r in runs}))
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("max concurrency")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def _serving_panel(runs: list[dict[str, Any]], key: str, title: str) -> Callable[[Any], None]:
    def paint(ax: Any) -> None:
        for system, backend, label in SERIES:
            xs, ys = _series(runs, system, backend, key)
            if xs:
                ax.plot(xs, ys, marker="o", label=label)
        _concurrency_axis(ax, runs, title)

    return paint


def _cost_panel(cost: dict[str, Any]) -> Callable[[Any], None]:
    def paint(ax: Any) -> None:
        names = ["gateway", "floor"]
        values = [cost["gateway"]["chunks_per_cpu_s"], cost["floor"]["chunks_per_cpu_s"]]
        bars = ax.bar(names, values, color=["tab:blue", "tab:gray"])
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values])
        ax.axhline(10_000, color="tab:red", linestyle="--", label="target 10,000")
        ax.set_title("SSE chunks per server CPU-second")
        ax.legend(fontsize=8)

    return paint


def _rates_panel(part: dict[str, Any]) -> Callable[[Any], None]:
    """Part 3's output tokens/s by concurrency, with E (the engine alone) as a line."""

    def paint(ax: Any) -> None:
        runs = part["runs"]
        for system, backend, label in (*SERIES, ("C'", "openai", "C' stream interval, completions"),
                                       ("C'", "openai-chat", "C' stream interval, chat")):  # fmt: skip
            xs, ys = _series(runs, system, backend, "output_throughput")
            if xs:
                ax.plot(xs, ys, marker="o", label=label)
        if part.get("engine"):
            ax.axhline(part["engine"]["output_throughput"], color="black", linestyle=":", label="E engine alone")
        _concurrency_axis(ax, runs, "part 3: output tokens/s (tiny random Llama)")

    return paint


def _stages_panel(part: dict[str, Any]) -> Callable[[Any], None]:
    """CPU µs per output token of each stage's busiest process at the top concurrency, against the µs that
    a 30,000 tokens/s ceiling allows."""

    def paint(ax: Any) -> None:
        top = max(r["max_concurrency"] for r in part["runs"])
        bars: dict[str, float] = {}
        for r in part["runs"]:
            if r["max_concurrency"] == top and r.get("cpu") and r.get("round", 0) == 0:
                for stage in STAGES.get(r["system"], ()):
                    if stage in r["cpu"]:
                        endpoint = ENDPOINTS.get(r["backend"], r["backend"])
                        bars[f"{r['system']} {stage}\n{endpoint}"] = r["cpu"][stage]["busiest_us_per_token"]
        drawn = ax.bar(list(bars), list(bars.values()), color="tab:blue")
        ax.bar_label(drawn, labels=[f"{v:.0f}" for v in bars.values()], fontsize=7)
        ax.axhline(1e6 / 30_000, color="tab:red", linestyle="--", label="30,000 tok/s ceiling")
        ax.tick_params(axis="x", labelsize=6, rotation=90)
        ax.set_title(f"part 3: CPU µs per token, busiest process per stage (c={top})")
        ax.legend(fontsize=8)

    return paint


def _routing_panel(rows: list[dict[str, Any]]) -> Callable[[Any], None]:
    """Part 4's TTFT p50 and p90 per policy, with each run's prefix-cache hit rate over its bars."""

    def paint(ax: Any) -> None:
        xs = range(len(rows))
        for offset, key, label in ((-0.2, "ttft_p50_ms", "TTFT p50"), (0.2, "ttft_p90_ms", "TTFT p90")):
            ax.bar([x + offset for x in xs], [r[key] or 0 for r in rows], width=0.4, label=label)
        for x, r in zip(xs, rows):
            if r["hit_rate"] is not None:
                top = max(r["ttft_p50_ms"] or 0, r["ttft_p90_ms"] or 0)
                ax.annotate(f"hits {r['hit_rate']:.0%}", (x, top), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs), [r["policy"] for r in rows])
        ax.set_ylabel("ms")
        ax.set_title("part 4: TTFT by routing policy (prefix-heavy load)")
        ax.legend(fontsize=8)

    return paint


def _panels(results: dict[str, Any]) -> list[Callable[[Any], None]]:
    panels = []
    runs = results.get("serving", {}).get("runs", [])
    if runs:
        panels += [_serving_panel(runs, "output_throughput", "output tokens/s"),
                   _serving_panel(runs, "p50_ttft_ms", "TTFT p50 (ms)")]  # fmt: skip
    cost = results.get("gateway_cost")
    if cost is not None and "error" not in cost:
        panels.append(_cost_panel(cost))
    rates = results.get("gpu_rates", {})
    if rates.get("runs"):
        panels += [_rates_panel(rates), _stages_panel(rates)]
    routing = results.get("routing", {})
    if routing.get("rows"):
        panels.append(_routing_panel(routing["rows"]))
    return panels


def draw(results: dict[str, Any], path: Path) -> Path | None:
    """None without matplotlib or without anything to draw."""
    if not available():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(results)
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, paint in zip(axes[0], panels):
        paint(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
