"""Part 5's report, from the runs' figures alone: the table, the ratios and issue 35's targets."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

SYSTEM_NAMES = {
    "A": "the stack as compose starts it",
    "C": "vllm serve, defaults",
    "C'": "vllm serve --api-server-count 4",
    "E": "the engine alone (vllm bench throughput, --max-num-seqs 512)",
}


@dataclass(frozen=True)
class Run:
    """One system at one concurrency on one shape. E has only the throughput."""

    shape: str
    system: str
    concurrency: int
    output_tok_s: float
    ttft_p50_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    completed: int = 0
    failed: int = 0


def run_from_serve(shape: str, system: str, concurrency: int, result: dict[str, Any]) -> Run:
    """A `vllm bench serve` result file's figures."""
    return Run(
        shape, system, concurrency,
        output_tok_s=float(result["output_throughput"]),
        ttft_p50_ms=float(result["median_ttft_ms"]),
        itl_p50_ms=float(result["median_itl_ms"]),
        itl_p99_ms=float(result["p99_itl_ms"]),
        completed=int(result["completed"]),
        failed=int(result.get("failed", 0) or 0),
    )  # fmt: skip


def run_from_throughput(shape: str, concurrency: int, result: dict[str, Any], output_len: int) -> Run:
    """A `vllm bench throughput --output-json` file: every request makes `output_len` tokens (ignore_eos)."""
    requests = int(result["num_requests"])
    return Run(shape, "E", concurrency, requests * output_len / float(result["elapsed_time"]), completed=requests)


@dataclass(frozen=True)
class Check:
    shape: str
    target: str
    value: float | None  # None: a run it needs is missing
    met: bool | None


def _find(runs: list[Run], shape: str, system: str, concurrency: int) -> Run | None:
    return next((r for r in runs if (r.shape, r.system, r.concurrency) == (shape, system, concurrency)), None)


def _ratio(
    runs: list[Run], shape: str, concurrency: int, other: str, field: str, limit: float, at_least: bool, label: str
) -> Check:
    a, b = _find(runs, shape, "A", concurrency), _find(runs, shape, other, concurrency)
    values = [getattr(run, field) if run else None for run in (a, b)]
    if None in values or not values[1]:
        return Check(shape, label, None, None)
    value = values[0] / values[1]
    return Check(shape, label, value, value >= limit if at_least else value <= limit)


def targets(runs: list[Run]) -> list[Check]:
    """Issue 35's targets, each on the runs it needs (8B unless said; the 1B one on the 1B shape)."""
    checks: list[Check] = []
    throughput: Callable[..., Check] = lambda shape, c, other, limit: _ratio(  # noqa: E731
        runs, shape, c, other, "output_tok_s", limit, True, f"A/{other} out tok/s at {c} ≥ {limit}"
    )
    for c in (64, 256):
        checks.append(throughput("8b", c, "C", 1.0))
    checks.append(throughput("8b", 512, "C", 1.15))
    checks.append(throughput("1b", 512, "C", 1.5))
    checks.append(throughput("8b", 512, "C'", 1.0))
    checks.append(throughput("8b", 512, "E", 0.9))
    for c in (64, 256, 512):
        checks.append(_ratio(runs, "8b", c, "C", "ttft_p50_ms", 1.0, False, f"TTFT p50 at {c} ≤ C's"))
    for c in (64, 256):
        checks.append(_ratio(runs, "8b", c, "C", "itl_p50_ms", 1.5, False, f"ITL p50 at {c} ≤ 1.5x C's"))
        checks.append(_ratio(runs, "8b", c, "C", "itl_p99_ms", 3.0, False, f"ITL p99 at {c} ≤ 3x C's"))
    a1, c1 = _find(runs, "8b", "A", 1), _find(runs, "8b", "C", 1)
    if a1 and c1 and a1.ttft_p50_ms is not None and c1.ttft_p50_ms is not None:
        extra = a1.ttft_p50_ms - c1.ttft_p50_ms
        checks.append(Check("8b", "TTFT p50 at 1 ≤ C's + 1 ms (ms over C's)", extra, extra <= 1.0))
    else:
        checks.append(Check("8b", "TTFT p50 at 1 ≤ C's + 1 ms (ms over C's)", None, None))
    checks.append(_ratio(runs, "8b", 1, "C", "itl_p50_ms", 1.02, False, "ITL p50 at 1 ≤ 1.02x C's"))
    failed = sum(run.failed for run in runs)
    checks.append(Check("all", "failed requests = 0", float(failed), failed == 0))
    return checks


def _cell(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def markdown(runs: list[Run], card: str, command: str) -> str:
    """The report: the card, the command, every run, then each target with its figure."""
    lines = [
        "# Part 5: the stack against vllm serve on a GPU",
        "",
        f"Card: {card}. Command: `{command}`.",
        "",
        *(f"- {system}: {name}" for system, name in SYSTEM_NAMES.items()),
        "",
        "| shape | streams | system | out tok/s | A / this | TTFT p50 ms | ITL p50 ms | ITL p99 ms | failed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in sorted(runs, key=lambda r: (r.shape, r.concurrency, list(SYSTEM_NAMES).index(r.system))):
        a = _find(runs, run.shape, "A", run.concurrency)
        ratio = a.output_tok_s / run.output_tok_s if a and run.system != "A" and run.output_tok_s else None
        lines.append(
            f"| {run.shape} | {run.concurrency} | {run.system} | {_cell(run.output_tok_s, 0)} | "
            f"{_cell(ratio, 2)} | {_cell(run.ttft_p50_ms)} | {_cell(run.itl_p50_ms, 2)} | "
            f"{_cell(run.itl_p99_ms, 2)} | {run.failed} |"
        )
    lines += ["", "| shape | target | figure | met |", "|---|---|---|---|"]
    for check in targets(runs):
        met = {True: "yes", False: "**no**", None: "not run"}[check.met]
        lines.append(f"| {check.shape} | {check.target} | {_cell(check.value, 2)} | {met} |")
    return "\n".join(lines) + "\n"


def as_json(runs: list[Run]) -> list[dict[str, Any]]:
    return [asdict(run) for run in runs]
