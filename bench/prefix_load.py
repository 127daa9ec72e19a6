"""Part 4's load: many clients sharing a few long system prompts, streamed chat completions through one gateway;
meanwhile each replica's waiting queue is sampled, and each replica's prefix-cache counters are read before and
after, from Triton's metrics port. From its own process, so that its CPU is not the gateway's.

Two scenarios (`--scenario`): `single`, one request per client turn, a system prompt drawn evenly and a short
distinct user message; `multiturn` (bench/conversations.py), conversations of 4 to 8 turns over system prompts of
Zipf popularity, each turn's prompt the whole history so far, each client sending a conversation's turns one after
another.

`python -m bench.prefix_load --url http://127.0.0.1:9000 --model tiny-random-llama --tokenizer DIR \
    --metrics-urls '["http://127.0.0.1:8002/metrics"]' --replicas '["127.0.0.1:8001"]' --tag rr --out r.json`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench import conversations
from bench.conversations import Conversation
from bench.http_load import _read_stream
from bench.loadgen import RequestRecord, drive, drive_sessions
from bench.routing_report import counter_delta, prefix_of_request, sample_sum, words
from bench.stats import percentile, summarize

COUNTERS = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
SETTLE_S = 5.0  # the longest wait for the engines' counters to stop moving after the load
SCENARIOS = ("single", "multiturn")
TOKENS_PER_WORD = 2.5  # the made-up words (routing_report.words) with SmolLM2's tokenizer: 652 characters, 250 tokens


def reply_words(max_tokens: int) -> int:
    """Words of a made-up assistant reply about as long as the replies the load asks for."""
    return max(1, round(max_tokens / TOKENS_PER_WORD))


def fewest_words(seed: str, tokens: int, count_tokens: Callable[[str], int]) -> str:
    """The shortest run of `words(seed, n)` that reaches `tokens` tokens: a longer run extends a shorter one, so
    the count only grows with n, and each word is at least one token, so n <= tokens."""
    low, high = 1, max(1, tokens)
    while low < high:
        middle = (low + high) // 2
        if count_tokens(words(seed, middle)) >= tokens:
            high = middle
        else:
            low = middle + 1
    return words(seed, low)


def system_prompts(tag: str, count: int, tokens: int, count_tokens: Callable[[str], int]) -> list[str]:
    """`count` system prompts of about `tokens` tokens each, distinct from their first characters (so that each
    has its own prefix key and its own cache blocks)."""
    return [f"System {tag} {i}. " + fewest_words(f"{tag}-system-{i}", tokens, count_tokens) for i in range(count)]


async def _scrape(session: aiohttp.ClientSession, url: str) -> list[Any]:
    async with session.get(url) as response:
        return list(text_string_to_metric_families(await response.text()))


async def counters(session: aiohttp.ClientSession, urls: list[str], model: str) -> list[dict[str, float]]:
    found = await asyncio.gather(*(_scrape(session, url) for url in urls))
    return [{name: sample_sum(families, name, model) for name in COUNTERS} for families in found]


async def settled_counters(session: aiohttp.ClientSession, urls: list[str], model: str) -> list[dict[str, float]]:
    """The counters once two reads a second apart agree: the engines report their stats a step late."""
    last = await counters(session, urls, model)
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = await counters(session, urls, model)
        if now == last:
            break
        last = now
    return last


async def sample_queues(
    session: aiohttp.ClientSession, urls: list[str], model: str, interval_s: float, into: list[list[float]]
) -> None:
    """Appends each replica's `vllm:num_requests_waiting` every `interval_s` until cancelled."""
    while True:
        started = time.monotonic()
        try:
            found = await asyncio.gather(*(_scrape(session, url) for url in urls))
            for samples, families in zip(into, found):
                samples.append(sample_sum(families, "vllm:num_requests_waiting", model))
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass  # a missed sample, not a failed run
        await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))


async def gateway_requests(session: aiohttp.ClientSession, url: str, replicas: list[str], model: str) -> list[float]:
    """How many requests the gateway sent to each replica (its own counter; the gateway is fresh for each run)."""
    families = await _scrape(session, f"{url}/metrics")
    found = {name: 0.0 for name in replicas}
    for family in families:
        for sample in family.samples:
            if sample.name == "gateway_replica_requests_total" and sample.labels.get("model") == model:
                if sample.labels.get("replica") in found:
                    found[sample.labels["replica"]] += sample.value
    return [found[name] for name in replicas]


def longest_prompt_tokens(args: argparse.Namespace, systems: list[str], count_chat: Callable[[list], int]) -> int:
    """The longest prompt the multi-turn load can send: the last turn of a conversation with the most turns, on the
    longest system prompt."""
    talk = Conversation(0, max(range(len(systems)), key=lambda i: len(systems[i])), args.max_turns)
    messages = conversations.turn_messages(
        args.tag, talk, talk.turns - 1, systems[talk.system], args.user_words, reply_words(args.max_tokens)
    )
    return count_chat(messages)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    def count_chat(messages: list) -> int:
        return count_tokens(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    systems = system_prompts(args.tag, args.prefixes, args.system_tokens, count_tokens)
    longest = longest_prompt_tokens(args, systems, count_chat) if args.scenario == "multiturn" else None
    if longest is not None and longest + args.max_tokens > args.max_model_len:
        raise SystemExit(
            f"the longest turn has {longest} prompt tokens: with {args.max_tokens} to generate it exceeds the "
            f"model's {args.max_model_len}; lower --system-tokens, --user-words or --max-turns"
        )
    metrics_urls, replicas = json.loads(args.metrics_urls), json.loads(args.replicas)
    url = f"{args.url.rstrip('/')}/v1/chat/completions"
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    turns = (args.min_turns, args.max_turns)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:

        async def post(messages: list[dict[str, str]], record: RequestRecord) -> None:
            body = {
                "model": args.model,
                "messages": messages,
                "max_tokens": args.max_tokens,
                "temperature": 0,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            async with session.post(url, json=body) as response:
                if response.status != 200:
                    record.error = f"HTTP {response.status}: {(await response.text())[:300]}"
                    return
                await _read_stream(response, record)

        async def send(i: int, record: RequestRecord) -> None:
            await post(
                [
                    {"role": "system", "content": systems[prefix_of_request(args.tag, i, args.prefixes)]},
                    {"role": "user", "content": f"User {i} asks: {words(f'{args.tag}-user-{i}', args.user_words)}?"},
                ],
                record,
            )

        async def send_turn(talk: Conversation, turn: int, record: RequestRecord) -> None:
            messages = conversations.turn_messages(
                args.tag, talk, turn, systems[talk.system], args.user_words, reply_words(args.max_tokens)
            )
            await post(messages, record)

        before = await counters(session, metrics_urls, args.model)
        queues: list[list[float]] = [[] for _ in metrics_urls]
        sampler = asyncio.create_task(sample_queues(session, metrics_urls, args.model, args.sample_interval, queues))
        try:
            until = args.until_file.exists if args.until_file else None
            if args.scenario == "multiturn":
                talks = (
                    conversations.endless(args.tag, args.prefixes, turns, args.zipf)
                    if until
                    else conversations.plan(args.tag, args.requests, args.prefixes, turns, args.zipf)
                )
                result = await drive_sessions(send_turn, args.clients, talks, lambda talk: talk.turns, until=until)
            else:
                result = await drive(send, args.clients, None if until else args.requests, until=until)
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        after = await settled_counters(session, metrics_urls, args.model)
        sent = await gateway_requests(session, args.url.rstrip("/"), replicas, args.model)
    summary = summarize(result)
    ttfts = [r.ttft * 1000 for r in result.records if r.ok and r.ttft is not None]
    summary["p90_ttft_ms"] = percentile(ttfts, 90) if ttfts else None
    usage = [r.prompt_tokens for r in result.records if r.ok and r.prompt_tokens]
    summary["prompt_tokens_mean"] = statistics.fmean(usage) if usage else None
    summary["replicas"] = [
        {
            "replica": name,
            "queries": counter_delta(b[COUNTERS[0]], a[COUNTERS[0]]),
            "hits": counter_delta(b[COUNTERS[1]], a[COUNTERS[1]]),
            "waiting_mean": statistics.fmean(q) if q else 0.0,
            "waiting_max": max(q, default=0.0),
            "samples": len(q),
            "requests": n,
        }
        for name, b, a, q, n in zip(replicas, before, after, queues, sent)
    ]
    summary.update({"max_concurrency": args.clients, "tag": args.tag, "client": "bench.prefix_load"})
    summary.update({"scenario": args.scenario, "longest_prompt_tokens": longest})
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the gateway's base URL")
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokenizer", required=True, help="the model's folder: sizes the system prompts in tokens")
    parser.add_argument("--metrics-urls", required=True, help="JSON list: each replica's Triton metrics URL")
    parser.add_argument("--replicas", required=True, help="JSON list: each replica's gRPC host:port, same order")
    parser.add_argument("--tag", required=True, help="seeds the prompts: each run its own, so no run finds another's")
    parser.add_argument("--prefixes", type=int, default=4, help="distinct system prompts")
    parser.add_argument("--system-tokens", type=int, default=1024, help="each system prompt's length in tokens")
    parser.add_argument("--scenario", choices=SCENARIOS, default="single")
    parser.add_argument("--user-words", type=int, default=8, help="each user message's made-up words")
    parser.add_argument("--min-turns", type=int, default=conversations.MIN_TURNS, help="multiturn: turns at least")
    parser.add_argument("--max-turns", type=int, default=conversations.MAX_TURNS, help="multiturn: turns at most")
    parser.add_argument("--zipf", type=float, default=conversations.ZIPF_EXPONENT, help="multiturn: the exponent")
    parser.add_argument("--max-model-len", type=int, default=2048, help="multiturn: the longest turn must fit")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--requests", type=int, default=512, help="multiturn: turns, over whole conversations")
    parser.add_argument("--until-file", type=Path, help="instead of --requests: send until this file exists")
    parser.add_argument("--sample-interval", type=float, default=0.1, help="seconds between queue samples")
    parser.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    summary = asyncio.run(run(args))
    Path(args.out).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
