"""The PNG chart, when matplotlib is installed (`pip install -e '.[bench]'`); without it the JSON and
markdown reports are complete and the chart is skipped with a note."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

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


def draw(results: dict[str, Any], path: Path) -> Path | None:
    if not available():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    runs = results.get("serving", {}).get("runs", [])
    cost = results.get("gateway_cost")
    cost = None if cost is None or "error" in cost else cost
    panels = (2 if runs else 0) + (1 if cost else 0)
    if not panels:
        return None
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
    axes = list(axes[0])
    if runs:
        for ax, key, title in ((axes.pop(0), "output_throughput", "output tokens/s"),
                               (axes.pop(0), "p50_ttft_ms", "TTFT p50 (ms)")):  # fmt: skip
            for system, backend, label in SERIES:
                xs, ys = _series(runs, system, backend, key)
                if xs:
                    ax.plot(xs, ys, marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({r["max_concurrency"] for r in runs}))
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("max concurrency")
            ax.set_title(title)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    if cost:
        ax = axes.pop(0)
        names = ["gateway", "floor"]
        values = [cost["gateway"]["chunks_per_cpu_s"], cost["floor"]["chunks_per_cpu_s"]]
        bars = ax.bar(names, values, color=["tab:blue", "tab:gray"])
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values])
        ax.axhline(10_000, color="tab:red", linestyle="--", label="target 10,000")
        ax.set_title("SSE chunks per server CPU-second")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
