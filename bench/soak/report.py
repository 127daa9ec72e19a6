"""The soak's after-checks and its summary table (pure: figures in, verdicts and text out)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bench.soak.outcomes import FAILURES, Exchange, Outcome, Verdict

# The gateway's memory may grow by less than this share between the end of warm-up and the end of the run.
RSS_GROWTH_LIMIT = 0.10
# Open descriptors and asyncio tasks back to their idle baseline, give or take this many.
FD_SLACK = 4
TASK_SLACK = 2


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    figure: str


def recovered(ready_again_s: list[float | None]) -> Check:
    """The gateway was ready again after each fault (None: it was not, within the soak's patience)."""
    figure = ", ".join("never" if took is None else f"{took:.1f} s" for took in ready_again_s)
    return Check("ready again after each fault", all(took is not None for took in ready_again_s), figure)


def engine_idle(running: float | None, waiting: float | None, after_s: float) -> Check:
    figure = f"running {running}, waiting {waiting}, {after_s:.1f} s after the load"
    return Check("engine queues empty within 5 s", running == 0 and waiting == 0 and after_s <= 5.0, figure)


def rss_growth(warm_bytes: int, end_bytes: int) -> Check:
    growth = end_bytes / warm_bytes - 1
    figure = f"{warm_bytes / 2**20:.0f} MiB after warm-up, {end_bytes / 2**20:.0f} MiB at the end ({growth:+.1%})"
    return Check(f"gateway RSS grew < {RSS_GROWTH_LIMIT:.0%}", growth < RSS_GROWTH_LIMIT, figure)


def back_to_baseline(what: str, baseline: int | None, end: int | None, slack: int) -> Check:
    if baseline is None or end is None:
        return Check(f"gateway {what} back to baseline", False, "not readable")
    return Check(f"gateway {what} back to baseline", end <= baseline + slack, f"{baseline} before, {end} after")


def no_orphans(left: list[str]) -> Check:
    return Check("no orphan processes", not left, ", ".join(left) if left else "none")


def no_failures(verdicts: list[Verdict]) -> Check:
    failed = sum(verdict.outcome in FAILURES for verdict in verdicts)
    return Check("every request complete or an explicit error", failed == 0, f"{failed} of {len(verdicts)} failed")


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def summary(
    exchanges: list[Exchange], verdicts: list[Verdict], faults: list[str], checks: list[Check], seconds: float
) -> str:
    """The table printed at the end of a soak."""
    lines = [f"soak: {len(exchanges)} requests in {seconds:.0f} s", "", "timeline:"]
    lines += [f"  {fault}" for fault in faults] or ["  none"]
    outcomes = list(Outcome)
    labels = sorted({exchange.label for exchange in exchanges})
    by_label = Counter((exchange.label, verdict.outcome) for exchange, verdict in zip(exchanges, verdicts))
    width = max([len("outcome")] + [len(outcome) for outcome in outcomes])
    lines += ["", f"{'outcome':<{width}} " + " ".join(f"{label:>18}" for label in labels) + f" {'total':>8}"]
    for outcome in outcomes:
        row = [by_label[(label, outcome)] for label in labels]
        if sum(row) or outcome not in FAILURES:
            mark = "  <- FAILURE" if outcome in FAILURES and sum(row) else ""
            lines.append(f"{outcome:<{width}} " + " ".join(f"{n:>18}" for n in row) + f" {sum(row):>8}{mark}")
    details = Counter((verdict.outcome, verdict.detail) for verdict in verdicts if verdict.detail)
    if details:
        lines += ["", "details (outcome: detail x count):"]
        lines += [f"  {outcome}: {detail} x {n}" for (outcome, detail), n in details.most_common(12)]
    lines += ["", "latency of complete requests (s):  p50    p95    max"]
    for label in labels:
        took = [e.latency_s for e, v in zip(exchanges, verdicts) if e.label == label and v.outcome is Outcome.COMPLETE]
        lines.append(f"  {label:<30} {_percentile(took, 0.5):6.2f} {_percentile(took, 0.95):6.2f} {max(took, default=0):6.2f}")
    slowest = max((exchange.latency_s for exchange in exchanges), default=0.0)
    lines.append(f"  slowest request of any outcome: {slowest:.1f} s")
    lines += ["", "after-checks:"]
    lines += [f"  [{'ok' if check.passed else 'FAIL'}] {check.name}: {check.figure}" for check in checks]
    return "\n".join(lines)
