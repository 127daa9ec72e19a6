"""The gateway's added time to first token, measured in pairs: one request through the gateway (A) and one
straight to Triton (B), one at a time, the order alternating from pair to pair. The medians of the paired
differences of each order, averaged, cancel the drift of a shared machine (which separate runs of a few
requests do not) and the effect of one request on the next.

`python -m bench.ttft_pairs --gateway-url http://127.0.0.1:9000 --grpc-url 127.0.0.1:8001 --prompts p.json --out r.json`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import tritonclient.grpc.aio as grpcclient

from bench import http_load, triton_load
from bench.loadgen import RequestRecord
from bench.prompts import load_prompts
from bench.stats import percentile


async def _gateway_ttft(session: aiohttp.ClientSession, url: str, model: str, prompt: str, max_tokens: int) -> float:
    record = RequestRecord(start=time.perf_counter())
    await http_load.one_request(session, url, http_load.payload(model, prompt, max_tokens, True, False), record)
    if not record.ok or record.ttft is None:
        raise RuntimeError(f"gateway request failed: {record.error}")
    return record.ttft


async def _triton_ttft(client: grpcclient.InferenceServerClient, model: str, prompt: str, max_tokens: int) -> float:
    record = RequestRecord(start=time.perf_counter())
    await triton_load.one_request(client, model, prompt, max_tokens, record)
    if not record.ok or record.ttft is None:
        raise RuntimeError(f"Triton request failed: {record.error}")
    return record.ttft


def both_orders_interval(diffs: Sequence[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the estimate (the median A-B of the pairs where A went first
    and of those where B did, averaged), each order's pairs resampled apart."""
    rng = random.Random(seed)
    first, second = list(diffs[0::2]), list(diffs[1::2])
    estimates = [
        (statistics.median(rng.choices(first, k=len(first))) + statistics.median(rng.choices(second, k=len(second))))
        / 2
        for _ in range(rounds)
    ]
    return percentile(estimates, 2.5), percentile(estimates, 97.5)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    prompts = [row["prompt"] for row in load_prompts(Path(args.prompts))] if args.prompts else ["Once upon a time"]
    url = f"{args.gateway_url.rstrip('/')}/v1/completions"
    client = grpcclient.InferenceServerClient(args.grpc_url)
    a_ttfts, b_ttfts = [], []
    try:
        async with aiohttp.ClientSession() as session:

            async def a(prompt: str) -> float:
                return await _gateway_ttft(session, url, args.model, prompt, args.max_tokens)

            async def b(prompt: str) -> float:
                return await _triton_ttft(client, args.model, prompt, args.max_tokens)

            for prompt in prompts[: args.warmups]:
                await a(prompt)
                await b(prompt)
            for i in range(args.pairs):
                # Two different prompts: the engine answers a prompt it has just seen a few ms sooner.
                first, second = prompts[(2 * i) % len(prompts)], prompts[(2 * i + 1) % len(prompts)]
                if i % 2 == 0:
                    a_ttfts.append(await a(first))
                    b_ttfts.append(await b(second))
                else:
                    b_ttfts.append(await b(first))
                    a_ttfts.append(await a(second))
    finally:
        await client.close()
    diffs = [(x - y) * 1000 for x, y in zip(a_ttfts, b_ttfts)]
    a_first, b_first = statistics.median(diffs[0::2]), statistics.median(diffs[1::2])
    low, high = both_orders_interval(diffs)
    return {
        "pairs": len(diffs),
        "max_tokens": args.max_tokens,
        "a_ttft_p50_ms": statistics.median(a_ttfts) * 1000,
        "b_ttft_p50_ms": statistics.median(b_ttfts) * 1000,
        # Whichever goes second in a pair may gain or lose from the first: the two orders' medians,
        # averaged, cancel that.
        "diff_a_first_median_ms": a_first,
        "diff_b_first_median_ms": b_first,
        "diff_median_ms": (a_first + b_first) / 2,
        # A CPU prefill varies by more than the difference under test: how far the estimate may be off.
        "diff_ci95_ms": [low, high],
        "diff_mean_ms": statistics.fmean(diffs),
        "a_ttfts_ms": [t * 1000 for t in a_ttfts],
        "b_ttfts_ms": [t * 1000 for t in b_ttfts],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gateway-url", required=True, help="the gateway's base URL")
    parser.add_argument("--grpc-url", required=True, help="Triton's gRPC host:port")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", help="JSON from bench.prompts; without it one short prompt is reused")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--warmups", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=4, help="only the first text is timed")
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    Path(args.out).write_text(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
