"""Part 3's ratios, stage ceilings, targets and markdown, from its raw runs (bench/gpu_rates.py).

A stage's ceiling is the output tokens per second at which its busiest process would use one whole core:
10^6 / that process's CPU µs per output token. The busiest process, not the stage's sum, because a stage of
several processes (the gateway's workers) saturates when its busiest one does. A path can carry no more than
its lowest stage's ceiling; on a GPU, where the engine is fast, that stage sets the rate."""

from __future__ import annotations

import statistics
from typing import Any

from bench.report import ENDPOINTS, _table, _target

# The single-process stages of each path whose ceilings count; the engine and the client are not the path's.
STAGES = {"A": ("gateway", "triton", "stub"), "B": ("triton", "stub"), "C": ("api server",), "C'": ("api server",)}
CPU_KINDS = ("gateway", "triton", "stub", "api server", "engine", "client")
HIGH_LEVELS = (256, 512)  # the concurrencies the throughput targets read
PATH_CEILING_TARGET = 30_000.0


def stage_ceilings(run: dict[str, Any]) -> dict[str, float]:
    """Stage -> output tokens/s at which its busiest process would fill one core."""
    cpu = run.get("cpu") or {}
    ceilings = {}
    for stage in STAGES.get(run["system"], ()):
        busiest = cpu.get(stage, {}).get("busiest_us_per_token")
        if busiest:
            ceilings[stage] = 1e6 / busiest
    return ceilings


def path_ceiling(ceilings: dict[str, float]) -> tuple[str, float] | None:
    """The lowest stage ceiling and its stage: what the whole path can carry."""
    if not ceilings:
        return None
    stage = min(ceilings, key=ceilings.__getitem__)
    return stage, ceilings[stage]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _by_round(runs: list[dict[str, Any]], system: str, backend: str, c: int) -> dict[int, dict[str, Any]]:
    return {
        r.get("round", 0): r
        for r in runs
        if r["system"] == system and r["backend"] == backend and r["max_concurrency"] == c
    }


def _paired(runs: list[dict[str, Any]], num: str, den: str, backend: str, c: int, value) -> float | None:
    """num/den of `value(run)`, the median over the rounds both systems ran (each round's pair back to back)."""
    a, b = _by_round(runs, num, backend, c), _by_round(runs, den, backend, c)
    return _median([_ratio(value(a[r]), value(b[r])) for r in sorted(a.keys() & b.keys())])


def _field(key: str):
    return lambda run: run.get(key)


def _path_value(run: dict[str, Any]) -> float | None:
    found = path_ceiling(stage_ceilings(run))
    return found[1] if found else None


def _busiest_stage_us(run: dict[str, Any]) -> float | None:
    """The highest µs per token of any of the path's own stages (per process)."""
    cpu = run.get("cpu") or {}
    values = [cpu[s]["busiest_us_per_token"] for s in STAGES.get(run["system"], ()) if s in cpu]
    return max(values) if values else None


def _median_of(runs: list[dict[str, Any]], system: str, backend: str, c: int, value) -> float | None:
    return _median([value(r) for r in _by_round(runs, system, backend, c).values()])


def ratio_rows(runs: list[dict[str, Any]], engine: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per concurrency and endpoint: the rates, A against C and C', and the ceilings against C's."""
    e_rate = engine.get("output_throughput") if engine else None
    rows = []
    for c in sorted({r["max_concurrency"] for r in runs if r["system"] == "A"}):
        for backend, endpoint in ENDPOINTS.items():
            tok = _field("output_throughput")
            a_rate = _median_of(runs, "A", backend, c, tok)
            rows.append({
                "concurrency": c,
                "endpoint": endpoint,
                "A tok/s": a_rate,
                "C tok/s": _median_of(runs, "C", backend, c, tok),
                "C' tok/s": _median_of(runs, "C'", backend, c, tok),
                "A/E tok/s": _ratio(a_rate, e_rate),
                "A/C tok/s": _paired(runs, "A", "C", backend, c, tok),
                "A/C' tok/s": _paired(runs, "A", "C'", backend, c, tok),
                "A/C TTFT p50": _paired(runs, "A", "C", backend, c, _field("p50_ttft_ms")),
                "A/C ITL p50": _paired(runs, "A", "C", backend, c, _field("p50_itl_ms")),
                "A/C ITL p99": _paired(runs, "A", "C", backend, c, _field("p99_itl_ms")),
                # Per token rather than per chunk: at one stream chunks arrive in bursts and ITL p50 nears zero.
                "A/C TPOT p50": _paired(runs, "A", "C", backend, c, _field("p50_tpot_ms")),
                "A path ceiling": _median_of(runs, "A", backend, c, _path_value),
                "C API server ceiling": _median_of(runs, "C", backend, c, _path_value),
                "A busiest stage/C API server µs": _paired(runs, "A", "C", backend, c, _busiest_stage_us),
            })  # fmt: skip
    return rows


def _high_levels(rows: list[dict[str, Any]]) -> list[int]:
    """256 and 512 when run; otherwise the highest level above 1, so a short run still checks something."""
    levels = sorted({row["concurrency"] for row in rows if row["concurrency"] > 1})
    return [c for c in levels if c in HIGH_LEVELS] or levels[-1:]


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    high = _high_levels(rows)
    loaded = sorted({r["concurrency"] for r in rows if r["concurrency"] > 1})
    checks = (
        ("A tok/s >= 1.0x C", "A/C tok/s", 1.0, True, ".3f", high),
        ("A tok/s >= 0.9x C'", "A/C' tok/s", 0.9, True, ".3f", high),
        ("A ITL p99 <= 1.2x C", "A/C ITL p99", 1.2, False, ".3f", loaded),
        ("A's every stage µs/token <= C's API server", "A busiest stage/C API server µs", 1.0, False, ".3f", high),
        ("A path ceiling >= 30,000 tok/s", "A path ceiling", PATH_CEILING_TARGET, True, ",.0f", high),
        ("A TTFT p50 <= 1.1x C", "A/C TTFT p50", 1.1, False, ".3f", [1]),
        ("A ITL p50 <= 1.1x C", "A/C ITL p50", 1.1, False, ".3f", [1]),
    )  # fmt: skip
    for name, key, limit, higher, fmt, levels in checks:
        for row in sorted(rows, key=lambda r: (r["concurrency"], r["endpoint"])):
            if row["concurrency"] in levels and row.get(key) is not None:
                label = f"{name} ({row['endpoint']}, c={row['concurrency']})"
                found.append(_target(label, row[key], limit, higher, fmt))
    return found


def _runs_table(runs: list[dict[str, Any]]) -> str:
    metrics = ["completed", "failed", "output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_itl_ms", "p99_itl_ms",
               "tokens_per_chunk"]  # fmt: skip
    headers = ["system", "endpoint", "c", "round", "completed", "failed", "tok/s", "TTFT p50", "TTFT p99", "ITL p50",
               "ITL p99", "tokens/chunk"]  # fmt: skip
    rows = [[r["system"], r["backend"], r["max_concurrency"], r.get("round", 0), *(r.get(m) for m in metrics)]
            for r in runs]  # fmt: skip
    return _table(headers, rows) + "\n\nTimes in ms; tokens/chunk as the client saw them.\n"


def _cpu_table(runs: list[dict[str, Any]]) -> str:
    def cell(run: dict[str, Any], kind: str) -> str | None:
        stage = (run.get("cpu") or {}).get(kind)
        if stage is None:
            return None
        processes = stage.get("processes")
        suffix = f" ({processes})" if processes and processes > 1 else ""
        return f"{stage['us_per_token']:,.1f}{suffix}"

    rows = [[r["system"], r["backend"], r["max_concurrency"], r.get("round", 0), *(cell(r, k) for k in CPU_KINDS)]
            for r in runs if r.get("cpu")]  # fmt: skip
    return (
        "CPU µs per output token by process (user + system, psutil; warm-ups counted as producing as many tokens as "
        "the others); in parentheses, how many processes of a stage were busy. `triton` is tritonserver itself, "
        "`stub` its Python-backend process (our backend with vLLM's AsyncLLM front end), `engine` vLLM's engine "
        "core and worker, `client` the load generator (its whole process, start-up and dataset included, so an upper "
        "bound that matters at small prompt counts).\n\n"
        + _table(["system", "endpoint", "c", "round", *CPU_KINDS], rows)
        + "\n"
    )


def _ceiling_table(runs: list[dict[str, Any]]) -> str:
    stages = ("gateway", "triton", "stub", "api server")
    rows = []
    for r in runs:
        ceilings = stage_ceilings(r)
        if ceilings:
            stage, value = path_ceiling(ceilings) or ("", None)
            rows.append([r["system"], r["backend"], r["max_concurrency"], r.get("round", 0),
                         *(ceilings.get(s) for s in stages), value, stage])  # fmt: skip
    return (
        "Stage ceilings, output tokens/s: 10^6 / the busiest process's CPU µs per token. Triton runs several "
        "threads, so its figure is the rate at which it would fill one core.\n\n"
        + _table(["system", "endpoint", "c", "round", *stages, "path", "limited by"], rows)
        + "\n"
    )


def markdown(part: dict[str, Any]) -> str:
    order = ("max_concurrency", "backend", "system", "round")
    runs = sorted(part.get("runs", []), key=lambda r: tuple(r.get(k, 0) for k in order))
    lines = ["## Part 3: GPU token rates (tiny random-weight Llama; E: engine alone, A, B, C as part 1, C': vllm "
             f"serve --stream-interval {part.get('stream_interval') or '-'})\n"]  # fmt: skip
    if "error" in part:
        lines.append(f"**Part 3 failed:** `{part['error']}` (the runs before the failure are below)\n")
    engine = part.get("engine")
    if engine:
        lines.append(
            f"E, `LLM.generate` alone: {engine['completed']} prompts, {engine['total_output_tokens']} output tokens "
            f"in {engine['duration']:.1f} s, **{engine['output_throughput']:,.0f} tok/s**.\n"
        )
    if runs:
        lines += [_runs_table(runs), _cpu_table(runs), _ceiling_table(runs)]
    ratios = part.get("ratios") or []
    if ratios:
        keys = [k for k in ratios[0] if k not in ("concurrency", "endpoint")]
        rows = [[row["concurrency"], row["endpoint"], *(row[k] for k in keys)] for row in ratios]
        lines.append(_table(["c", "endpoint", *keys], rows) + "\n")
    return "\n".join(lines)
