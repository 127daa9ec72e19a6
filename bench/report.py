"""Ratios, targets and the written report (JSON and markdown), from the raw runs of both parts.

Every target is a ratio between systems measured side by side in the same run, so the
targets are checked on ratios, never on absolute numbers."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

ENDPOINTS = {"openai": "completions", "openai-chat": "chat"}


def _rounds(runs: list[dict[str, Any]], system: str, backend: str, concurrency: int) -> dict[int, dict[str, Any]]:
    """A system's runs at one endpoint and concurrency, by round."""
    return {
        run.get("round", 0): run
        for run in runs
        if run["system"] == system and run["backend"] == backend and run["max_concurrency"] == concurrency
    }


def _find(runs: list[dict[str, Any]], system: str, backend: str, concurrency: int) -> dict[str, Any] | None:
    return _rounds(runs, system, backend, concurrency).get(0)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def ac_rounds(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A against C round by round: each round's A and C ran one right after the other."""
    rows = []
    for c in sorted({r["max_concurrency"] for r in runs if r["system"] == "C"}):
        for backend, endpoint in ENDPOINTS.items():
            a_runs, c_runs = _rounds(runs, "A", backend, c), _rounds(runs, "C", backend, c)
            for round_ in sorted(a_runs.keys() & c_runs.keys()):
                a, cc = a_runs[round_], c_runs[round_]
                rows.append(
                    {
                        "concurrency": c,
                        "endpoint": endpoint,
                        "round": round_,
                        "A tok/s": a.get("output_throughput"),
                        "C tok/s": cc.get("output_throughput"),
                        "A/C tok/s": _ratio(a.get("output_throughput"), cc.get("output_throughput")),
                        "A/C TTFT p50": _ratio(a.get("p50_ttft_ms"), cc.get("p50_ttft_ms")),
                    }
                )
    return rows


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _get(run: dict[str, Any] | None, key: str) -> float | None:
    return None if run is None else run.get(key)


def serving_ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per concurrency: A/C per endpoint (the median of the rounds' ratios), and A against B on completions."""
    rows = []
    by_round = ac_rounds(runs)
    for c in sorted({r["max_concurrency"] for r in runs if r["backend"] in ENDPOINTS or r["system"] == "B"}):
        row: dict[str, Any] = {"concurrency": c}
        for endpoint in ENDPOINTS.values():
            mine = [r for r in by_round if r["concurrency"] == c and r["endpoint"] == endpoint]
            row[f"A/C tok/s {endpoint}"] = _median([r["A/C tok/s"] for r in mine])
            row[f"A/C TTFT p50 {endpoint}"] = _median([r["A/C TTFT p50"] for r in mine])
        a, b = _find(runs, "A", "openai", c), _find(runs, "B", "triton-grpc", c)
        row["A/B tok/s"] = _ratio(_get(a, "output_throughput"), _get(b, "output_throughput"))
        row["A/B TTFT p50"] = _ratio(_get(a, "p50_ttft_ms"), _get(b, "p50_ttft_ms"))
        a_ttft, b_ttft = _get(a, "p50_ttft_ms"), _get(b, "p50_ttft_ms")
        row["A-B TTFT p50 ms"] = a_ttft - b_ttft if a_ttft is not None and b_ttft is not None else None
        rows.append(row)
    return rows


def _over_floor(round_: dict[str, Any], key: str) -> float | None:
    return _ratio(round_["gateway"][key], round_["floor"][key])


def _cost_rounds(cost: dict[str, Any]) -> list[dict[str, Any]]:
    """Gateway and floor round by round; a run without rounds counts as one round."""
    return cost.get("rounds") or [{"round": 0, "gateway": cost["gateway"], "floor": cost["floor"]}]


def _grpc_ceiling(round_: dict[str, Any]) -> float | None:
    """The gateway/floor ratio a gateway would reach if it spent nothing beyond its gRPC client's reads."""
    return _ratio(round_["floor"]["cpu_us_per_chunk"], round_["grpc_read"]["cpu_us_per_message"])


def _grpc_figures(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    if not all("grpc_read" in r for r in rounds):
        return {}
    return {
        "gRPC client alone CPU us per message": _median([r["grpc_read"]["cpu_us_per_message"] for r in rounds]),
        "gateway CPU us per chunk beyond its gRPC client": _median(
            [r["gateway"]["cpu_us_per_chunk"] - r["grpc_read"]["cpu_us_per_message"] for r in rounds]
        ),
        "gateway/floor ceiling set by the gRPC client": _median([_grpc_ceiling(r) for r in rounds]),
    }


def cost_figures(cost: dict[str, Any]) -> dict[str, Any]:
    """Gateway/floor ratios are the medians of the rounds' ratios; the other figures come from the runs with the
    median chunks per CPU-s."""
    gateway, floor, direct = cost["gateway"], cost["floor"], cost["triton_direct"]
    c1 = cost["latency_c1"]
    rounds = _cost_rounds(cost)
    return {
        "gateway/floor chunks per CPU-s": _median([_over_floor(r, "chunks_per_cpu_s") for r in rounds]),
        "gateway/floor chunks/s": _median([_over_floor(r, "chunks_per_s") for r in rounds]),
        "gateway chunks per CPU-s": gateway["chunks_per_cpu_s"],
        "gateway CPU us per chunk": gateway["cpu_us_per_chunk"],
        "floor CPU us per chunk": floor["cpu_us_per_chunk"],
        **_grpc_figures(rounds),
        "added e2e latency p50 ms, c=1": c1["gateway"]["p50_e2el_ms"] - c1["triton_direct"]["p50_e2el_ms"],
        "added TTFT p50 ms, c=1": c1["gateway"]["p50_ttft_ms"] - c1["triton_direct"]["p50_ttft_ms"],
        f"added e2e latency p50 ms, c={gateway['max_concurrency']}": gateway["p50_e2el_ms"] - direct["p50_e2el_ms"],
        "gateway RSS idle MB": cost["rss"]["rss_start_mb"],
        "gateway RSS peak MB": cost["rss"]["rss_peak_mb"],
        "streams held open": cost["rss"]["peak_in_flight"],
    }


def _target(name: str, value: float | None, limit: float, higher_is_better: bool, fmt: str) -> dict[str, Any]:
    if value is None:
        return {"target": name, "value": None, "pass": None}
    passed = value >= limit if higher_is_better else value <= limit
    shown = format(value, fmt)
    if not passed and float(shown.replace(",", "")) == limit:
        shown = format(value, ".6g")  # a miss by less than the last digit shown must not read as the limit itself
    return {"target": name, "value": shown, "pass": passed}


def targets(
    runs: list[dict[str, Any]],
    ratios: list[dict[str, Any]],
    pairs: dict[str, Any] | None,
    cost: dict[str, Any] | None,
) -> list[dict]:
    found = []
    by_c = {row["concurrency"]: row for row in ratios}
    for c in (32, 64):
        for endpoint in ENDPOINTS.values():
            value = by_c.get(c, {}).get(f"A/C tok/s {endpoint}")
            if value is not None:
                found.append(_target(f"A tok/s >= 1.0x C ({endpoint}, c={c})", value, 1.0, True, ".3f"))
    for c, row in sorted(by_c.items()):
        for endpoint in ENDPOINTS.values():
            value = row.get(f"A/C TTFT p50 {endpoint}")
            if value is not None:
                found.append(_target(f"A TTFT p50 <= 1.1x C ({endpoint}, c={c})", value, 1.1, False, ".3f"))
    if pairs:  # paired requests, one at a time: the drift between separate runs cancels out
        name = f"A TTFT - B <= 2 ms (c=1, {pairs['pairs']} pairs)"
        found.append(_target(name, pairs["diff_median_ms"], 2.0, False, ".2f"))
    elif by_c.get(1, {}).get("A-B TTFT p50 ms") is not None:
        found.append(_target("A TTFT p50 - B <= 2 ms (c=1)", by_c[1]["A-B TTFT p50 ms"], 2.0, False, ".2f"))
    if by_c.get(64, {}).get("A/B tok/s") is not None:
        found.append(_target("A tok/s >= 0.95x B (c=64)", by_c[64]["A/B tok/s"], 0.95, True, ".3f"))
    stream = next((r for r in runs if r["backend"] == "http-stream"), None)
    plain = next((r for r in runs if r["backend"] == "http-nonstream"), None)
    if stream and plain:
        value = _ratio(stream["request_throughput"], plain["request_throughput"])
        name = f"streaming req/s >= 0.9x non-streaming (c={stream['max_concurrency']})"
        found.append(_target(name, value, 0.9, True, ".3f"))
    if cost:
        figures = cost_figures(cost)
        found.append(
            _target(
                "gateway >= 0.5x floor chunks per CPU-s", figures["gateway/floor chunks per CPU-s"], 0.5, True, ".3f"
            )
        )
        found.append(
            _target(
                "gateway >= 10,000 chunks per CPU core-second",
                figures["gateway chunks per CPU-s"],
                10_000,
                True,
                ",.0f",
            )
        )
        streams = figures["streams held open"]
        found.append(
            _target(f"gateway RSS <= 300 MB ({streams} streams)", figures["gateway RSS peak MB"], 300, False, ".1f")
        )
    return found


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


CPU_ROLES = ("gateway", "triton", "vllm serve", "engine")


def _cpu_table(runs: list[dict[str, Any]]) -> str:
    """Where each run's CPU went, per output token: the serving processes apart from vLLM's engine."""
    measured = sorted(
        (r for r in runs if r.get("cpu_us_per_token")),
        key=lambda r: (r["max_concurrency"], r["backend"], r.get("round", 0), r["system"]),
    )
    if not measured:
        return ""
    rows = [
        [r["system"], r["backend"], r["max_concurrency"], r.get("round", 0),
         *(r["cpu_us_per_token"].get(role) for role in CPU_ROLES)]  # fmt: skip
        for r in measured
    ]
    return (
        "CPU per output token (µs of user + system time, psutil), by process: the gateway; Triton with its Python "
        "stub (our backend, vLLM's detokenizing front end); `vllm serve`'s API server; vLLM's engine-core and worker "
        "processes. Warm-up requests are counted as producing as many tokens as the others.\n\n"
        + _table(["system", "endpoint", "c", "round", *CPU_ROLES], rows)
        + "\n"
    )


def _interval(pairs: dict[str, Any]) -> str:
    interval = pairs.get("diff_ci95_ms")
    return f", 95% bootstrap interval {interval[0]:.2f} to {interval[1]:.2f} ms" if interval else ""


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(results: dict[str, Any], sections: tuple[str, ...] = ()) -> str:
    """`sections`: other parts' markdown (part 3's, from bench/gpu_report.py), placed before the targets."""
    parts = [f"# Benchmark {results['started']}\n", f"`{results['command']}`\n"]
    for key, title in (("serving", "Part 1"), ("gateway_cost", "Part 2")):
        if "error" in results.get(key, {}):
            parts.append(f"**{title} failed:** `{results[key]['error']}` (the runs before the failure are below)\n")
    runs = results.get("serving", {}).get("runs", [])
    if runs:
        parts.append("## Part 1: end to end (A: gateway, B: Triton gRPC, C: vllm serve)\n")
        metrics = ["output_throughput", "request_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_itl_ms", "p99_itl_ms"]
        headers = [
            "system",
            "endpoint",
            "c",
            "round",
            "completed",
            "failed",
            "tok/s",
            "req/s",
            "TTFT p50",
            "TTFT p99",
            "ITL p50",
            "ITL p99",
        ]
        rows = [
            [
                r["system"],
                r["backend"],
                r["max_concurrency"],
                r.get("round", 0),
                r.get("completed"),
                r.get("failed"),
                *(r.get(m) for m in metrics),
            ]
            for r in sorted(runs, key=lambda r: (r["system"], r["backend"], r["max_concurrency"], r.get("round", 0)))
        ]
        parts.append(_table(headers, rows) + "\n\nTimes in ms.\n")
        parts.append(_cpu_table(runs))
        differ = results["serving"].get("engine_config", {}).get("differ")
        if differ is not None:
            rows = [[key, f"`{a}`", f"`{c}`"] for key, (a, c) in differ.items()]
            parts.append("Engine configuration logged by A's and C's engines, fields that differ:\n")
            parts.append((_table(["field", "A", "C"], rows) if rows else "none") + "\n")
        rounds = ac_rounds(runs)
        if any(r["round"] for r in rounds):
            keys = list(rounds[0])
            parts.append(
                "A and C round by round (each round's two runs back to back, A first in even rounds); the ratios "
                "below are the medians of these rounds.\n\n"
                + _table(["c" if k == "concurrency" else k for k in keys], [[r[k] for k in keys] for r in rounds])
                + "\n"
            )
        ratios = results["serving"]["ratios"]
        if ratios:
            keys = [k for k in ratios[0] if k != "concurrency"]
            parts.append(_table(["c", *keys], [[row["concurrency"], *(row[k] for k in keys)] for row in ratios]) + "\n")
        pairs = results["serving"].get("ttft_pairs")
        if pairs:
            parts.append(
                f"Added time to first token, {pairs['pairs']} requests through A and B in alternating pairs, one at a "
                f"time ({pairs['max_tokens']} output tokens): A-B {pairs['diff_median_ms']:.2f} ms{_interval(pairs)} "
                "(median A-B "
                f"{pairs['diff_a_first_median_ms']:.2f} ms when A goes first, {pairs['diff_b_first_median_ms']:.2f} ms "
                f"when B does, averaged); mean {pairs['diff_mean_ms']:.2f} ms; A p50 {pairs['a_ttft_p50_ms']:.1f} ms, "
                f"B p50 {pairs['b_ttft_p50_ms']:.1f} ms.\n"
            )
    cost = results.get("gateway_cost")
    if cost and "error" not in cost:
        parts.append("## Part 2: the gateway's own cost (fake zero-cost model; floor: bare Starlette)\n")
        headers = [
            "server",
            "streams",
            "completed",
            "chunks/s",
            "server CPU s",
            "chunks per CPU-s",
            "CPU us/chunk",
            "TTFT p50",
            "e2e p50",
        ]
        rows = []
        for label, key in (
            ("gateway", "gateway"),
            ("floor", "floor"),
            ("Triton direct (Triton + stub CPU)", "triton_direct"),
        ):
            r = cost[key]
            rows.append([label, r["max_concurrency"], r["completed"], r["chunks_per_s"], r["server_cpu_s"],
                         r["chunks_per_cpu_s"], r["cpu_us_per_chunk"], r["p50_ttft_ms"], r["p50_e2el_ms"]])  # fmt: skip
        for label, key in (("gateway", "gateway"), ("floor", "floor"), ("Triton direct", "triton_direct")):
            r = cost["latency_c1"][key]
            rows.append([f"{label}, one at a time", 1, r["completed"], r["chunks_per_s"], r["server_cpu_s"],
                         r["chunks_per_cpu_s"], r["cpu_us_per_chunk"], r["p50_ttft_ms"], r["p50_e2el_ms"]])  # fmt: skip
        parts.append(_table(headers, rows) + "\n")
        if cost.get("rounds"):
            parts.append("Gateway and floor took turns; the table above shows each one's median round.\n")
            round_rows = [
                [r["round"], r["gateway"]["cpu_us_per_chunk"], r["floor"]["cpu_us_per_chunk"],
                 _over_floor(r, "chunks_per_cpu_s"), r.get("grpc_read", {}).get("cpu_us_per_message")]
                for r in cost["rounds"]
            ]  # fmt: skip
            headers = ["round", "gateway CPU us/chunk", "floor CPU us/chunk", "gateway/floor",
                       "gRPC client alone CPU us/message"]  # fmt: skip
            parts.append(_table(headers, round_rows) + "\n")
        figures = cost_figures(cost)
        parts.append(_table(["figure", "value"], [[k, v] for k, v in figures.items()]) + "\n")
        if cost.get("workers"):
            rows = [[w["workers"], w["output_throughput"], w["cpu_us_per_token"], w["chunks_per_s"], w["p50_ttft_ms"]]
                    for w in cost["workers"]]  # fmt: skip
            parts.append("GATEWAY_WORKERS, each a gateway of its own under the same load (tokens from the usage "
                         "chunk; CPU summed over uvicorn's supervisor and workers):\n\n"
                         + _table(["workers", "tokens/s", "CPU µs/token", "chunks/s", "TTFT p50"], rows)
                         + "\n")  # fmt: skip
    parts.extend(sections)
    parts.append("## Targets\n")
    verdict = {True: "yes", False: "**no**", None: "–"}
    parts.append(
        _table(
            ["target", "measured", "met"], [[t["target"], t["value"], verdict[t["pass"]]] for t in results["targets"]]
        )
    )
    return "\n".join(parts) + "\n"


def write(out_dir: Path, results: dict[str, Any], sections: tuple[str, ...] = ()) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "results.json", out_dir / "results.md"
    json_path.write_text(json.dumps(results, indent=2, default=str))
    md_path.write_text(markdown(results, sections))
    return [json_path, md_path]
