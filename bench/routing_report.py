"""Part 4's pure side: the prefix-heavy workload's prompts, the engines' cache size, and the figures, targets and
table drawn from each policy's run (bench/routing.py runs them, bench/prefix_load.py drives one).

A run's record per replica holds the deltas of the engine's prefix-cache counters (queried and cached tokens)
and the mean of its `vllm:num_requests_waiting` samples; everything here is arithmetic on those."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from bench.report import _fmt, _table, _target

PREFIX = "prefix"
POLICIES = ("round_robin", "least_load", PREFIX)
SINGLE = "single"  # the same load on one replica alone: the hit-rate baseline
RESTART = "prefix_restart"  # `prefix` while one replica's Triton restarts (a rolling update's SIGTERM)
RUNS = (SINGLE, *POLICIES, RESTART)

_SYLLABLES = ("ka", "lo", "mi", "ren", "tu", "sal", "vor", "ne", "pi", "dra", "ost", "el", "qua", "bim", "zu", "fen")


def words(seed: str, count: int) -> str:
    """`count` made-up words, the same for the same seed: prompts whose text no other run shares."""
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(count))


def prefix_of_request(tag: str, index: int, prefixes: int) -> int:
    """Which system prompt request `index` uses: random but fixed, never in step with round-robin's turns."""
    return random.Random(f"{tag}:{index}").randrange(prefixes)


def kv_blocks(
    prefixes: int,
    prefix_tokens: int,
    clients: int,
    replicas: int,
    block_tokens: int = 128,
    max_model_len: int = 2048,
    client_blocks: int = 1,
) -> int:
    """An engine's KV cache, in blocks: the full blocks of its share of the system prompts under affinity
    (ceil(prefixes / replicas) of them), `client_blocks` of its own for each of its share of the clients (single
    requests: one, the end of the prompt, the user's message and the short reply; conversations: a history's), and
    four spare; never less than one longest request (vLLM refuses to start otherwise). Every prompt on every
    replica does not fit: the regime where a fleet's prompts outgrow one engine's cache, and where routing decides
    what stays cached and how many requests run at once."""
    shared = prefix_tokens // block_tokens  # only full blocks are cached and shared
    blocks = math.ceil(prefixes / replicas) * shared + math.ceil(clients / replicas) * client_blocks + 4
    return max(blocks, math.ceil(max_model_len / block_tokens) + 1)


def sample_sum(families: Any, name: str, model: str) -> float:
    """The sum of `name`'s samples for `model` (or with no model label) in parsed Prometheus families."""
    total = 0.0
    for family in families:
        for sample in family.samples:
            if sample.name == name and sample.labels.get("model", model) == model:
                total += sample.value
    return total


def counter_delta(before: float, after: float) -> float:
    """What a counter counted over a run; one that went back was restarted with its replica, and counted `after`
    since then (what it counted before the restart is lost)."""
    return after - before if after >= before else after


def hit_rate(hits: float, queries: float) -> float | None:
    """Cached tokens over queried tokens; None when nothing was queried."""
    return hits / queries if queries > 0 else None


def queue_ratio(waiting_means: Sequence[float]) -> float | None:
    """The busiest replica's mean waiting queue over the replicas' average: 1.0 when no replica queued at all
    (no queue is an even one), None without replicas."""
    if not waiting_means:
        return None
    average = sum(waiting_means) / len(waiting_means)
    return max(waiting_means) / average if average > 0 else 1.0


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def policy_row(run: dict[str, Any]) -> dict[str, Any]:
    """One run's figures: latency, rate, cache hits per replica and overall, queue balance, errors."""
    replicas = run.get("replicas", [])
    queries = sum(r["queries"] for r in replicas)
    hits = sum(r["hits"] for r in replicas)
    return {
        "policy": run["policy"],
        "completed": run.get("completed", 0),
        "errors": run.get("failed", 0),
        "ttft_p50_ms": run.get("p50_ttft_ms"),
        "ttft_p90_ms": run.get("p90_ttft_ms"),
        "output_tok_s": run.get("output_throughput"),
        "prompt_tokens_mean": run.get("prompt_tokens_mean"),
        "hit_rate": hit_rate(hits, queries),
        "hit_rate_per_replica": {r["replica"]: hit_rate(r["hits"], r["queries"]) for r in replicas},
        "requests_per_replica": {r["replica"]: r.get("requests") for r in replicas},
        "waiting_mean_per_replica": {r["replica"]: r["waiting_mean"] for r in replicas},
        "busiest_queue_over_average": queue_ratio([r["waiting_mean"] for r in replicas]),
        "restart": run.get("restart"),
    }


def rows(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [policy_row(run) for run in runs]


def _row(found: Sequence[dict[str, Any]], policy: str) -> dict[str, Any] | None:
    return next((r for r in found if r["policy"] == policy), None)


def _get(row: dict[str, Any] | None, key: str) -> Any:
    return None if row is None else row.get(key)


def ratios(found: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """What the targets read, for `prefix`: TTFT p90 over round-robin's and least-load's, output rate over
    round-robin's, hit rate over the single replica's."""
    round_robin, least_load, single = _row(found, "round_robin"), _row(found, "least_load"), _row(found, SINGLE)
    row = _row(found, PREFIX)
    return {
        "prefix/round_robin TTFT p90": _ratio(_get(row, "ttft_p90_ms"), _get(round_robin, "ttft_p90_ms")),
        "prefix/least_load TTFT p90": _ratio(_get(row, "ttft_p90_ms"), _get(least_load, "ttft_p90_ms")),
        "prefix/round_robin tok/s": _ratio(_get(row, "output_tok_s"), _get(round_robin, "output_tok_s")),
        "prefix/single hit rate": _ratio(_get(row, "hit_rate"), _get(single, "hit_rate")),
    }


def targets(found: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 37's targets for `prefix` (set for the multi-turn scenario; read for either): TTFT p90 <= 0.6x
    round_robin's and <= 0.8x least_load's, output tok/s >= 1.1x round_robin's, hit rate >= 0.9x one replica's,
    the busiest queue <= 1.5x the average, no errors in any policy's run, nor through a replica's restart."""
    if not found:
        return []
    r = ratios(found)
    prefix = _row(found, PREFIX)
    errors = sum(row["errors"] or 0 for row in found if row["policy"] != RESTART)
    return [
        _target("part 4: prefix TTFT p90 <= 0.6x round_robin", r["prefix/round_robin TTFT p90"], 0.6, False, ".3f"),
        _target("part 4: prefix TTFT p90 <= 0.8x least_load", r["prefix/least_load TTFT p90"], 0.8, False, ".3f"),
        _target("part 4: prefix tok/s >= 1.1x round_robin", r["prefix/round_robin tok/s"], 1.1, True, ".3f"),
        _target("part 4: prefix hit rate >= 0.9x one replica's", r["prefix/single hit rate"], 0.9, True, ".3f"),
        _target("part 4: prefix busiest queue <= 1.5x average", _get(prefix, "busiest_queue_over_average"), 1.5,
                False, ".3f"),  # fmt: skip
        _target("part 4: errors, every policy", float(errors), 0.0, False, ".0f"),
        _target("part 4: errors through a replica restart", _get(_row(found, RESTART), "errors"), 0.0, False, ".0f"),
    ]


def _per_replica(row: dict[str, Any], key: str, digits: int) -> str:
    return " / ".join(_fmt(v, digits) for v in row[key].values()) or "–"


def markdown(part: dict[str, Any]) -> str:
    scenario = (part.get("workload") or {}).get("scenario", "single")
    lines = [f"## Part 4: routing over two replicas, a prefix-heavy workload ({scenario}; prefix caching on)\n"]
    if "error" in part:
        lines.append(f"**Part 4 failed:** `{part['error']}` (the runs before the failure are below)\n")
    workload = part.get("workload")
    if workload:
        lines.append(", ".join(f"{k} {v}" for k, v in workload.items()) + "\n")
    found = part.get("rows") or []
    if found:
        headers = ["policy", "completed", "errors", "TTFT p50", "TTFT p90", "tok/s", "prompt tokens", "hit rate",
                   "hit rate per replica", "requests per replica", "mean waiting per replica",
                   "busiest/avg queue"]  # fmt: skip
        table = [[r["policy"], r["completed"], r["errors"], r["ttft_p50_ms"], r["ttft_p90_ms"], r["output_tok_s"],
                  r["prompt_tokens_mean"], r["hit_rate"], _per_replica(r, "hit_rate_per_replica", 3),
                  _per_replica(r, "requests_per_replica", 0), _per_replica(r, "waiting_mean_per_replica", 2),
                  r["busiest_queue_over_average"]] for r in found]  # fmt: skip
        lines.append(_table(headers, table))
        lines.append("\nTimes in ms. Hit rate: the engines' cached over queried prompt tokens (counter deltas over the "
                     "run). Waiting: `vllm:num_requests_waiting` sampled about every 100 ms.\n")  # fmt: skip
        lines.append(", ".join(f"{k}: {_fmt(v, 3)}" for k, v in ratios(found).items()) + "\n")
    restart = _get(_row(found, RESTART), "restart")
    if restart:
        lines.append(restart_sentence(restart) + "\n")
    return "\n".join(lines)


def restart_sentence(figures: dict[str, Any]) -> str:
    """What the restart run did to its replica, and the traffic the replica got."""
    f = figures
    return (
        f"{RESTART}: replica {f['replica']} got SIGTERM {f['restarted_after_s']:g} s into the run, drained and "
        f"stopped in {f['drained_and_stopped_s']:g} s, and was ready again {f['ready_again_s']:g} s later; the "
        f"gateway sent it {f['requests_while_away']:g} requests meanwhile and {f['requests_after_back']:g} in the "
        f"{f['tail_s']:g} s after. Its prefix-cache counters restarted with it: its hit rate counts only since then."
    )
