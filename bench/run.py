"""`python -m bench`: starts what each part needs, runs the loads, writes results.json, results.md and
chart.png under the output folder, and stops everything it started.

    python -m bench                         # both parts
    python -m bench --part1                 # end to end only: A and C taking turns, B on A's stack
    python -m bench --part2                 # the gateway's own cost only (no engine, two to three minutes)
    python -m bench --part2 --workers 1,2,4 # and GATEWAY_WORKERS 1, 2 and 4 under the same load
    python -m bench --part3                 # GPU token rates on a tiny random-weight Llama (E, A, B, C, C')
    python -m bench --part3 --concurrency 64 --num-prompts 64 --systems A,C   # a short smoke run
    python -m bench --part1 --systems A --concurrency 1 --num-prompts 2 --nonstream-concurrency 0
    python -m bench --part4                 # routing over two replicas: round_robin, least_load, prefix
    python -m bench --part4 --scenario multiturn --model smollm2-135m-instruct --clients 8   # conversations
    python -m bench --part4 --clients 8 --requests-per-run 24 --system-prompts 2 --system-tokens 512  # a smoke run
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from bench import chart, conversations, gpu_report, report, routing_report
from bench.gateway_cost import CostConfig, GatewayCost
from bench.gpu_rates import CONCURRENCIES as RATES_CONCURRENCIES
from bench.gpu_rates import SYSTEMS as RATES_SYSTEMS
from bench.gpu_rates import GpuRates, RatesConfig
from bench.prompts import Workload
from bench.routing import Routing, RoutingConfig
from bench.prefix_load import SCENARIOS
from bench.routing_report import PREFIX, RESTART, RUNS, SINGLE
from bench.serving import Serving, ServingConfig
from localstack.paths import DEFAULT_MODEL_NAME, REPO_ROOT, CachePaths, default_cache_dir
from localstack.processes import stop_on_sigterm


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--part1", action="store_true", help="end to end: A gateway, B Triton gRPC, C vllm serve")
    parser.add_argument("--part2", action="store_true", help="the gateway's own cost against a bare ASGI floor")
    parser.add_argument("--part3", action="store_true", help="GPU token rates on a tiny random-weight Llama")
    parser.add_argument("--part4", action="store_true", help="routing over two replicas, a prefix-heavy workload")
    parser.add_argument("--out-dir", type=Path, help="default: .run/bench/<timestamp>")

    one = parser.add_argument_group("parts 1 and 3 (part 3's defaults in brackets)")
    one.add_argument("--systems", help="any of A,B,C (default: all) [E,A,B,C,C']")
    one.add_argument("--concurrency", type=_ints, help="comma-separated (default 1,8,32,64) [1,64,256,512]")
    one.add_argument("--prompts-per-concurrency", type=int, help="prompts = this x concurrency (default 4) [2]")
    one.add_argument("--min-prompts", type=int, default=16, help="at least this many prompts per run (default 16)")
    one.add_argument(
        "--num-prompts", type=int, help="the same prompt count at every concurrency (overrides the two above)"
    )
    one.add_argument("--warmups", type=int, help="warm-up requests per run (default: the concurrency) [a quarter]")
    one.add_argument("--input-len", type=int, default=128)
    one.add_argument("--output-len", type=int, help="(default 64) [256]")
    one.add_argument(
        "--nonstream-concurrency", type=int, default=64, help="streaming vs not on A at this concurrency; 0 skips"
    )
    one.add_argument(
        "--ttft-pairs", type=int, default=ServingConfig.ttft_pairs, help="A/B request pairs for the added TTFT; 0 skips"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help="rounds of taking turns: A and C at 32 and 64, gateway and floor in part 2 (default 3); part 3: A, C "
        "and C' at 256 and 512 [1]",
    )

    two = parser.add_argument_group("part 2")
    two.add_argument("--streams", type=int, default=64, help="concurrent streams (default 64)")
    two.add_argument("--max-tokens", type=int, default=256, help="chunks per stream (default 256)")
    two.add_argument("--duration", type=float, default=10.0, help="seconds of load per server (default 10)")
    two.add_argument("--latency-requests", type=int, default=20, help="requests one at a time for added latency")
    two.add_argument("--rss-streams", type=int, default=256, help="streams held open for the memory reading")
    two.add_argument("--rss-max-tokens", type=int, default=60)
    two.add_argument("--rss-token-delay", type=float, default=0.1, help="seconds between the slow model's chunks")
    two.add_argument("--workers", type=_ints, default=[1], help="GATEWAY_WORKERS counts to measure (default 1)")

    three = parser.add_argument_group("part 3")
    three.add_argument(
        "--stream-interval", type=int, help="C''s --stream-interval (default: the one A's model.json uses; none: no C')"
    )
    three.add_argument("--gateway-workers", type=int, default=1, help="A's GATEWAY_WORKERS (default 1)")
    three.add_argument(
        "--placement",
        choices=("on", "off"),
        help="the local stack's core placement for A and B (default: the model's own, off for the fast model)",
    )
    four = parser.add_argument_group("part 4")
    four.add_argument("--clients", type=int, default=RoutingConfig.clients, help="concurrent clients (default 64)")
    four.add_argument("--requests-per-run", type=int, default=RoutingConfig.requests, help="per policy (default 512)")
    four.add_argument("--system-prompts", type=int, default=RoutingConfig.prefixes, help="shared prompts (default 4)")
    four.add_argument("--system-tokens", type=int, default=RoutingConfig.system_tokens, help="each (default 1024)")
    four.add_argument("--reply-tokens", type=int, default=RoutingConfig.max_tokens, help="max_tokens (default 16)")
    four.add_argument(
        "--scenario", choices=SCENARIOS, default=RoutingConfig.scenario, help="single requests (default), or "
        "multiturn conversations: each turn sends the whole history so far, system prompts of Zipf popularity"
    )  # fmt: skip
    four.add_argument("--user-words", type=int, help="each user message's words (default: 8 single, 24 multiturn)")
    four.add_argument(
        "--turns", default=f"{conversations.MIN_TURNS},{conversations.MAX_TURNS}",
        help="multiturn: a conversation's turns, at least and at most (default 4,8)",
    )  # fmt: skip
    four.add_argument("--zipf", type=float, default=conversations.ZIPF_EXPONENT, help="multiturn: the Zipf exponent "
                      "of the system prompts' popularity (default 1)")  # fmt: skip
    four.add_argument(
        "--kv-blocks", type=int, help="each engine's KV cache in 128-token blocks (default: a share of the prompts "
        "fits, not all; 0: the engine's own size)"
    )  # fmt: skip
    four.add_argument(
        "--memory-share", type=float, help="each engine's share of the machine's memory (default: the model's own; "
        "a capped cache needs little)"
    )  # fmt: skip
    four.add_argument(
        "--model", default=RoutingConfig.model, help=f"a prepared model or a Hugging Face folder (default "
        f"{RoutingConfig.model}; {DEFAULT_MODEL_NAME}: prefills that cost what a prefix hit saves)"
    )  # fmt: skip
    four.add_argument(
        "--policies", default=",".join(RUNS), help=f"runs, in order (default {','.join(RUNS)}; {SINGLE}: one "
        f"replica alone; {RESTART}: {PREFIX} while a replica restarts)"
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not (args.part1 or args.part2 or args.part3 or args.part4):
        args.part1 = args.part2 = True
    if args.part1 and args.part3 and args.systems:
        parser.error("--systems means different things in parts 1 and 3: run them apart")
    args.turns = _ints(args.turns)
    if len(args.turns) != 2 or not 1 <= args.turns[0] <= args.turns[1]:
        parser.error("--turns takes two counts, at least and at most: 4,8")
    runs = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not runs or not set(runs) <= set(RUNS):
        parser.error(f"--policies takes {', '.join(RUNS)}")
    known = set(RATES_SYSTEMS) if args.part3 else {"A", "B", "C"}
    args.systems = {s.strip().upper() for s in args.systems.split(",") if s.strip()} if args.systems else None
    if args.systems and not args.systems <= known:
        parser.error(f"--systems takes {', '.join(sorted(known))}")
    return args


def _or(value: Any, default: Any) -> Any:
    """A shared option's value, or the part's own default when it was not given."""
    return default if value is None else value


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _print_targets(found: list[dict[str, Any]]) -> None:
    verdict = {True: "met", False: "NOT MET", None: "n/a"}
    for t in found:
        _log(f"  {t['target']:<58} {t['value'] or '-':>12}  {verdict[t['pass']]}")


def _part1(args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """Runs so far are kept when a later one fails, so a failure still leaves a report."""
    workload = Workload(CachePaths(default_cache_dir()).default_model_dir, args.input_len, _or(args.output_len, 64))
    serving_config = ServingConfig(
        out_dir=out_dir,
        workload=workload,
        systems=_or(args.systems, {"A", "B", "C"}),
        concurrencies=_or(args.concurrency, [1, 8, 32, 64]),
        prompts_per_concurrency=_or(args.prompts_per_concurrency, 4),
        min_prompts=args.min_prompts,
        num_prompts=args.num_prompts,
        warmups=args.warmups,
        nonstream_concurrency=args.nonstream_concurrency,
        ttft_pairs=args.ttft_pairs,
        rounds=_or(args.rounds, ServingConfig.rounds),
    )
    serving = Serving(serving_config, _log)
    part: dict[str, Any] = {}
    try:
        serving.run()
    except Exception as exc:
        _log(f"part 1 failed: {exc}")
        part["error"] = str(exc)
    part["runs"] = serving.runs
    part["ttft_pairs"] = serving.ttft_pairs
    part["engine_config"] = serving.engine_config()
    if part["engine_config"]["differ"] is not None:
        _log(f"  engine configuration, A vs C, differs in: {part['engine_config']['differ'] or 'nothing'}")
    part["ratios"] = report.serving_ratios(serving.runs)
    for row in part["ratios"]:
        shown = ", ".join(
            f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items() if v is not None
        )
        _log(f"  ratios {shown}")
    return part


def _part2(args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    cost_config = CostConfig(
        out_dir=out_dir,
        streams=args.streams,
        max_tokens=args.max_tokens,
        duration_s=args.duration,
        rounds=_or(args.rounds, CostConfig.rounds),
        latency_requests=args.latency_requests,
        rss_streams=args.rss_streams,
        rss_max_tokens=args.rss_max_tokens,
        slow_token_delay_s=args.rss_token_delay,
        workers=tuple(args.workers),
    )
    try:
        part = GatewayCost(cost_config, _log).run()
    except Exception as exc:
        _log(f"part 2 failed: {exc}")
        return {"error": str(exc)}
    for name, value in report.cost_figures(part).items():
        _log(f"  {name}: {value:,.3f}" if isinstance(value, float) else f"  {name}: {value}")
    return part


def _part3(args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """Like part 1, runs so far are kept when a later one fails."""
    workload = Workload(CachePaths(default_cache_dir()).fast_model_dir, args.input_len, _or(args.output_len, 256))
    config = RatesConfig(
        out_dir=out_dir,
        workload=workload,
        systems=_or(args.systems, set(RATES_SYSTEMS)),
        concurrencies=_or(args.concurrency, list(RATES_CONCURRENCIES)),
        prompts_per_concurrency=_or(args.prompts_per_concurrency, RatesConfig.prompts_per_concurrency),
        min_prompts=args.min_prompts,
        num_prompts=args.num_prompts,
        warmups=args.warmups,
        rounds=_or(args.rounds, RatesConfig.rounds),
        stream_interval=args.stream_interval,
        gateway_workers=args.gateway_workers,
        placement=None if args.placement is None else args.placement == "on",
    )
    rates = GpuRates(config, _log)
    part: dict[str, Any] = {}
    try:
        rates.run()
    except Exception as exc:
        _log(f"part 3 failed: {exc}")
        part["error"] = str(exc)
    part.update({"runs": rates.runs, "engine": rates.engine, "stream_interval": rates.stream_interval})
    part["engine_config"] = rates.engine_config()
    part["ratios"] = gpu_report.ratio_rows(rates.runs, rates.engine)
    for row in part["ratios"]:
        _log("  " + ", ".join(f"{k}={v:,.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    return part


def _part4(args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """Like parts 1 and 3, runs so far are kept when a later one fails."""
    config = RoutingConfig(
        out_dir=out_dir,
        clients=args.clients,
        requests=args.requests_per_run,
        prefixes=args.system_prompts,
        system_tokens=args.system_tokens,
        max_tokens=args.reply_tokens,
        user_words=args.user_words,
        scenario=args.scenario,
        min_turns=args.turns[0],
        max_turns=args.turns[1],
        zipf=args.zipf,
        kv_blocks=args.kv_blocks,
        memory_share=args.memory_share,
        model=args.model,
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
    )
    routing = Routing(config, _log)
    part: dict[str, Any] = {"workload": config.workload()}
    try:
        routing.run()
    except Exception as exc:
        _log(f"part 4 failed: {exc}")
        part["error"] = str(exc)
    part["runs"] = routing.runs
    part["rows"] = routing_report.rows(routing.runs)
    for name, value in routing_report.ratios(part["rows"]).items():
        _log(f"  {name}: {'-' if value is None else f'{value:.3f}'}")
    return part


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    stop_on_sigterm()
    started = time.strftime("%Y%m%d-%H%M%S")
    out_dir: Path = (args.out_dir or REPO_ROOT / ".run" / "bench" / started).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started": started,
        "command": shlex.join([sys.executable, "-m", "bench", *(argv or sys.argv[1:])]),
    }
    _log(f"results in {out_dir}")
    if args.part1:
        results["serving"] = _part1(args, out_dir / "part1")
    if args.part2:
        results["gateway_cost"] = _part2(args, out_dir / "part2")
    if args.part3:
        results["gpu_rates"] = _part3(args, out_dir / "part3")
    if args.part4:
        results["routing"] = _part4(args, out_dir / "part4")
    results["targets"] = report.targets(
        results.get("serving", {}).get("runs", []),
        results.get("serving", {}).get("ratios", []),
        results.get("serving", {}).get("ttft_pairs"),
        results.get("gateway_cost") if "error" not in results.get("gateway_cost", {}) else None,
    ) + gpu_report.targets(results.get("gpu_rates", {}).get("ratios", []))
    results["targets"] += routing_report.targets(results.get("routing", {}).get("rows", []))
    _log("targets:")
    _print_targets(results["targets"])
    sections = (gpu_report.markdown(results["gpu_rates"]),) if "gpu_rates" in results else ()
    if "routing" in results:
        sections += (routing_report.markdown(results["routing"]),)
    written = report.write(out_dir, results, sections)
    png = chart.draw(results, out_dir / "chart.png")
    if png is None:
        _log("chart skipped: nothing to draw, or matplotlib is not installed (pip install -e '.[bench]')")
    else:
        written.append(png)
    _log("wrote " + ", ".join(str(p) for p in written))
    if any("error" in results.get(key, {}) for key in ("serving", "gateway_cost", "gpu_rates", "routing")):
        sys.exit(1)


if __name__ == "__main__":
    main()
