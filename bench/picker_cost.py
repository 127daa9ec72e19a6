"""The picker's cost per request (issue 37's target: at most 50 µs at 2,000-token prompts under `prefix`).

What a request pays for routing, in the gateway's own code: `Fleet.prefix_blocks` (the prompt laid out and hashed
into blocks) and `Fleet.choose` (the eligible replicas, their views with each one's
matched blocks from the index, the pick, and the index's update). The fleet is real; its replicas are stand-ins
that answer its model-index calls (no Triton: only the decision is timed), with made-up loads. Before timing, the
index is warmed with `--conversations` multi-turn conversations over `--system-prompts` system prompts, so that
lookups meet a populated index; the timed requests are later turns of those conversations (a long match on one
replica, the system prompt's on others) and new conversations (a system prompt's match only). The figure is this
process's CPU time per pick (median of 5 rounds), so that other processes on a shared machine do not count.

    python -m bench.picker_cost                      # 2 and 8 replicas, every policy, prompts of 8,000 characters
    python -m bench.picker_cost --chars 16000 --replicas 2
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry

from bench.routing_report import words
from gateway.core.upstream import GenerateChunk, GenerateRequest
from gateway.model_map import ModelEntry
from gateway.resilience.breaker import BreakerBoard
from gateway.routing.fleet import Fleet, FleetConfig
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.upstreams import ModelLoad, ReplicaLoad, UpstreamEntries

MODEL = "m"
POLICIES = ("round_robin", "least_load", "prefix")
# English runs about 4 characters a token with SmolLM2's tokenizer: 8,000 characters is about 2,000 tokens.
DEFAULT_CHARS = 8000


class StandInReplica:
    """What the fleet asks of a replica's client outside a generation: its model index and readiness."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.breakers = BreakerBoard(5, 10.0)
        self.health_timeout_s = 1.0

    async def repository_index(self) -> list[ModelEntry]:
        return [ModelEntry(MODEL, "1", "READY", max_model_len=8192)]

    async def server_ready(self) -> bool:
        return True

    async def close(self) -> None:
        pass

    def cut_streams(self, error: object) -> int:
        return 0

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        raise NotImplementedError("only the decision is timed")
        yield  # pragma: no cover


def conversation(system: str, seed: str, chars: int) -> list[dict[str, str]]:
    """A chat of about `chars` characters: the system prompt, then turns of made-up words until it is long enough."""
    messages = [{"role": "system", "content": system}]
    total, turn = len(system), 0
    while total < chars:
        role = "user" if turn % 2 == 0 else "assistant"
        content = words(f"{seed}-{turn}", 60)
        messages.append({"role": role, "content": content})
        total += len(content)
        turn += 1
    return messages


async def _fleet(policy: str, replicas: int, rng: random.Random) -> Fleet:
    urls = [f"10.0.0.{i}:8001" for i in range(replicas)]
    stand_ins = {url: StandInReplica(url) for url in urls}
    config = FleetConfig(policy=policy)  # type: ignore[arg-type]
    metrics_urls = {u: f"http://{u}/metrics" for u in urls}
    make_client = stand_ins.__getitem__  # stand-ins for TritonClient: the fleet only asks them what they define
    fleet = Fleet(UpstreamEntries(tuple(urls)), metrics_urls, make_client, config, RoutingMetrics(CollectorRegistry()))
    await fleet.refresh()
    for replica in fleet.replicas.values():  # loads as a scrape leaves them
        replica.in_flight = rng.randrange(0, 16)
        replica.load = ReplicaLoad({MODEL: ModelLoad(running=rng.randrange(0, 16), waiting=rng.randrange(0, 4),
                                                     kv_cache_usage=rng.random())})  # fmt: skip
    return fleet


def _route(fleet: Fleet, request: GenerateRequest) -> None:
    fleet.choose(request.model, fleet.prefix_blocks(request), set())


async def measure(policy: str, replicas: int, chars: int, conversations: int, systems: int, picks: int) -> dict:
    rng = random.Random(37)
    fleet = await _fleet(policy, replicas, rng)
    prompts = [f"System {i}. " + words(f"system-{i}", 400) for i in range(systems)]  # about 2,000 characters each
    chats = [conversation(prompts[rng.randrange(systems)], f"c{i}", chars) for i in range(conversations)]
    requests = [GenerateRequest(MODEL, f"r{i}", {}, True, messages=chat) for i, chat in enumerate(chats)]
    for request in requests:  # the earlier turns: the index learns where each conversation lives
        _route(fleet, request)
    fresh = [GenerateRequest(MODEL, f"n{i}", {}, True, messages=conversation(prompts[i % systems], f"new{i}", chars))
             for i in range(64)]  # fmt: skip
    timed = [requests[rng.randrange(conversations)] if i % 4 else fresh[i % len(fresh)] for i in range(picks)]
    rounds = []
    for _ in range(5):
        started = time.process_time_ns()  # CPU time: the machine's other processes do not count
        for request in timed:
            _route(fleet, request)
        rounds.append((time.process_time_ns() - started) / picks / 1000)
    mean_chars = statistics.fmean(sum(len(m["content"]) for m in r.messages or []) for r in timed)
    await fleet.close()
    return {
        "policy": policy, "replicas": replicas, "prompt_chars": round(mean_chars),
        "index_entries": len(fleet.index), "us_per_pick_median": statistics.median(rounds),
        "us_per_pick_min": min(rounds),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chars", type=int, default=DEFAULT_CHARS, help="each prompt's length in characters")
    parser.add_argument("--replicas", default="2,8", help="comma-separated replica counts")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--conversations", type=int, default=2000, help="conversations that warm the index")
    parser.add_argument("--system-prompts", type=int, default=8)
    parser.add_argument("--picks", type=int, default=5000, help="timed picks per round (5 rounds)")
    args = parser.parse_args(argv)
    print(f"{'policy':<12} {'replicas':>8} {'prompt chars':>12} {'index entries':>13} {'µs/pick median':>15} "
          f"{'min':>7}")  # fmt: skip
    for replicas in (int(n) for n in args.replicas.split(",")):
        for policy in args.policies.split(","):
            run = measure(policy, replicas, args.chars, args.conversations, args.system_prompts, args.picks)
            row = asyncio.run(run)
            print(f"{row['policy']:<12} {row['replicas']:>8} {row['prompt_chars']:>12} {row['index_entries']:>13} "
                  f"{row['us_per_pick_median']:>15.1f} {row['us_per_pick_min']:>7.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
