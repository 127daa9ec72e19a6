"""Part 2's gRPC half: the gateway's own Triton client (`gateway.triton_client`), alone in a process,
reading the same streams from the same Triton as the gateway does under load. Its CPU per message is what
the gateway spends before any HTTP work, and so the least any gateway fed by gRPC's asyncio client spends.

`python -m bench.grpc_read --url 127.0.0.1:8001 --concurrency 64 --max-tokens 256 --duration 10 --out r.json`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

from gateway.settings import get_settings
from localstack.paths import DEFAULT_MODEL_NAME


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # Imported here: gRPC reads GRPC_EXPERIMENTS once, at import, and main() sets it as the gateway does.
    from gateway.core.upstream import GenerateRequest
    from gateway.triton_client import TritonClient

    client = TritonClient(args.url, request_timeout_s=600.0, health_timeout_s=5.0, model_cache_s=0.0)
    sampling = {"max_tokens": args.max_tokens, "ignore_eos": True, "temperature": 0}
    counts = {"messages": 0, "requests": 0}

    async def worker(index: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            request_id = f"grpc-read-{index}-{counts['requests']}"
            request = GenerateRequest(args.model, request_id, sampling, stream=True, text_input="hi")
            counts["requests"] += 1
            async for _ in client.generate(request):
                counts["messages"] += 1

    async def load(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(worker(i, deadline) for i in range(args.concurrency)))

    try:
        await load(args.warmup)
        counts.update(messages=0, requests=0)
        cpu, wall = _cpu_s(), time.monotonic()
        await load(args.duration)
        cpu, wall = _cpu_s() - cpu, time.monotonic() - wall
    finally:
        await client.close()
    messages = counts["messages"]
    return {
        "client": "bench.grpc_read",
        "max_concurrency": args.concurrency,
        "requests": counts["requests"],
        "messages": messages,
        "wall_s": wall,
        "cpu_s": cpu,
        "messages_per_s": messages / wall if wall else 0.0,
        "messages_per_cpu_s": messages / cpu if cpu else 0.0,
        "cpu_us_per_message": cpu * 1e6 / messages if messages else 0.0,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="Triton's gRPC host:port")
    parser.add_argument("--model", default=DEFAULT_MODEL_NAME)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first")
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    os.environ["GRPC_EXPERIMENTS"] = get_settings().grpc_experiments
    Path(args.out).write_text(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
