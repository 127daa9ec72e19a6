"""An OpenAI `/v1/completions` load generator (aiohttp), streaming or not. Drives the gateway and the
floor app in part 2 and the streaming/non-streaming check of part 1, from its own process so its CPU
is not charged to the server under test.

`python -m bench.http_load --url http://127.0.0.1:9000 --concurrency 64 --max-tokens 256 --duration 5 --out r.json`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.loadgen import RequestRecord, StreamTimer, drive
from bench.prompts import load_prompts
from bench.stats import summarize

_DATA = b"data: "
_DONE = b"[DONE]"


def payload(model: str, prompt: str, max_tokens: int, stream: bool, include_usage: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream and include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


async def _read_stream(response: aiohttp.ClientResponse, record: RequestRecord) -> None:
    """Splits SSE events by hand (cheap on the client's CPU); counts the chunks carrying choices."""
    timer = StreamTimer(record)
    buffer = b""
    last = b""
    done = False
    try:
        async for data in response.content.iter_any():
            buffer += data
            events = buffer.split(b"\n\n")
            buffer = events.pop()
            arrived = 0
            for event in events:
                event = event.strip()
                if not event.startswith(_DATA):
                    continue  # a comment (ping)
                body = event[len(_DATA) :]
                if body == _DONE:
                    done = True
                    continue
                if body.startswith(b'{"error"'):
                    record.error = body.decode(errors="replace")[:300]
                    continue
                last = body
                if b'"choices":[]' in body:  # the usage chunk
                    continue
                arrived += 1
                record.payload_bytes += len(body)
            timer.chunk(arrived)
    finally:
        timer.finish()
    usage = json.loads(last).get("usage") if b'"usage":{' in last else None
    record.output_tokens = usage["completion_tokens"] if usage else record.chunks
    record.prompt_tokens = (usage.get("prompt_tokens") or 0) if usage else 0
    record.ok = done and record.error is None and record.chunks > 0


async def one_request(session: aiohttp.ClientSession, url: str, body: dict[str, Any], record: RequestRecord) -> None:
    async with session.post(url, json=body) as response:
        if response.status != 200:
            record.error = f"HTTP {response.status}: {(await response.text())[:300]}"
            return
        if body["stream"]:
            await _read_stream(response, record)
            return
        raw = await response.read()
        record.latency = time.perf_counter() - record.start
        data = json.loads(raw)
        record.output_tokens = data["usage"]["completion_tokens"]
        record.payload_bytes = len(raw)
        record.ok = True


async def run(args: argparse.Namespace) -> dict[str, Any]:
    prompts = load_prompts(Path(args.prompts)) if args.prompts else [{"prompt": "Once upon a time", "output_len": 16}]
    url = f"{args.url.rstrip('/')}/v1/completions"
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    connector = aiohttp.TCPConnector(limit=0)  # no cap: the driver sets the concurrency
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def send(i: int, record: RequestRecord) -> None:
            row = prompts[i % len(prompts)]
            max_tokens = args.max_tokens or row["output_len"]
            body = payload(args.model, row["prompt"], max_tokens, args.stream, args.include_usage)
            await one_request(session, url, body, record)

        requests = None if args.duration else (args.requests or len(prompts))
        result = await drive(send, args.concurrency, requests, args.duration or None, args.warmups)
    summary = summarize(result)
    summary.update({"max_concurrency": args.concurrency, "stream": args.stream, "client": "bench.http_load"})
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:9000")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", help="JSON from bench.prompts; without it one short prompt is reused")
    parser.add_argument("--max-tokens", type=int, default=0, help="0: each prompt's own output length")
    parser.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--include-usage", action="store_true", help="ask for the usage chunk when streaming")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=0, help="0: one per prompt")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds; overrides --requests")
    parser.add_argument("--warmups", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0, help="per request, seconds")
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    try:
        import uvloop  # the client's own CPU is not under test: keep it cheap

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    summary = runner(run(args))
    Path(args.out).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
