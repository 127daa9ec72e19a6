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
from pathlib import Path
from typing import Any

from bench.loadgen import RequestRecord, drive
from gateway.settings import get_settings
from localstack.paths import DEFAULT_MODEL_NAME


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # Imported here: gRPC reads GRPC_EXPERIMENTS once, at import, and main() sets it as the gateway does.
    from gateway.core.upstream import GenerateRequest
    from gateway.triton_client import TritonClient

    client = TritonClient(args.url, request_timeout_s=600.0, health_timeout_s=5.0)
    sampling = {"max_tokens": args.max_tokens, "ignore_eos": True, "temperature": 0}

    async def send(i: int, record: RequestRecord) -> None:
        request = GenerateRequest(args.model, f"grpc-read-{i}", sampling, stream=True, text_input="hi")
        async for _ in client.generate(request):
            record.chunks += 1
        record.ok = True

    try:
        await drive(send, args.concurrency, duration_s=args.warmup)
        cpu = _cpu_s()
        result = await drive(send, args.concurrency, duration_s=args.duration)
        cpu = _cpu_s() - cpu
    finally:
        await client.close()
    messages, wall = sum(r.chunks for r in result.records), result.wall_s
    return {
        "client": "bench.grpc_read",
        "max_concurrency": args.concurrency,
        "requests": len(result.records),
        "failed": sum(not r.ok for r in result.records),
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
