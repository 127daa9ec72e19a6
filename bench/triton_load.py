"""B: the floor for the gateway. Streams the same prompts straight to Triton over gRPC, with the inputs
our backend reads, and records what a client of Triton itself would see.

Run in its own process: `python -m bench.triton_load --url 127.0.0.1:8001 --prompts p.json --out r.json ...`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as grpcclient

from bench.loadgen import RequestRecord, StreamTimer, drive
from bench.prompts import load_prompts
from bench.stats import summarize

_U32 = struct.Struct("<I")


def _input(name: str, value: object, datatype: str) -> grpcclient.InferInput:
    array = np.array([value], dtype=np.object_ if datatype == "BYTES" else np.bool_)
    tensor = grpcclient.InferInput(name, [1], datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def request_inputs(prompt: str, max_tokens: int) -> list[grpcclient.InferInput]:
    sampling = {"max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
    return [
        _input("text_input", prompt.encode(), "BYTES"),
        _input("stream", True, "BOOL"),
        _input("sampling_parameters", json.dumps(sampling).encode(), "BYTES"),
        _input("exclude_input_in_output", True, "BOOL"),
        # The outputs the gateway asks for (gateway/core/triton_codec.py), so that B costs Triton what A does.
        _input("return_num_input_tokens", True, "BOOL"),
        _input("return_num_output_tokens", True, "BOOL"),
        # Tells the client which response is the last, since this API cannot ask for an empty final one.
        _input("return_finish_reason", True, "BOOL"),
        # Counts and finish reasons only in the responses that have news: the final one has the counts.
        _input("sparse_outputs", True, "BOOL"),
    ]


def raw_outputs(result: grpcclient.InferResult) -> dict[str, bytes]:
    """Output name -> raw bytes, read off the protobuf: `as_numpy` per output per token would make this
    client, not Triton, the bottleneck."""
    response = result.get_response()
    return {tensor.name: raw for tensor, raw in zip(response.outputs, response.raw_output_contents)}


async def one_request(
    client: grpcclient.InferenceServerClient, model: str, prompt: str, max_tokens: int, record: RequestRecord
) -> None:
    inputs = request_inputs(prompt, max_tokens)

    async def requests():
        yield {"model_name": model, "inputs": inputs}

    timer = StreamTimer(record)
    responses = client.stream_infer(requests())
    finished = ended = False
    try:
        async for result, error in responses:
            if error is not None:
                record.error = str(error)
                return
            if finished:
                continue  # Triton closes the stream right after the final response
            outputs = raw_outputs(result)
            if "text_output" not in outputs:  # an empty final response
                finished = True
                continue
            text_bytes = len(outputs["text_output"]) - 4
            if text_bytes > 0:  # timed like `vllm bench serve` times A and C: from the first non-empty text
                timer.chunk()
            record.payload_bytes += text_bytes
            counts = outputs.get("num_output_tokens")
            if counts:
                record.output_tokens += sum(value for (value,) in _U32.iter_unpack(counts))
            finished = outputs.get("finish_reason", b"")[4:] not in (b"None", b"")
        ended = True
        record.ok = record.chunks > 0
    finally:
        timer.finish()
        if not ended:
            # Cancelling a stream that already ended leaves the request behind in Triton, so only here.
            responses.cancel()


async def run(args: argparse.Namespace) -> dict:
    prompts = load_prompts(Path(args.prompts)) if args.prompts else [{"prompt": "Once upon a time"}]
    client = grpcclient.InferenceServerClient(args.url)
    try:

        async def send(i: int, record: RequestRecord) -> None:
            row = prompts[i % len(prompts)]
            max_tokens = args.max_tokens or row["output_len"]
            await one_request(client, args.model, row["prompt"], max_tokens, record)

        requests = None if args.duration else (args.requests or len(prompts))
        result = await drive(send, args.concurrency, requests, args.duration or None, args.warmups)
    finally:
        await client.close()
    summary = summarize(result)
    summary.update({"system": "B", "max_concurrency": args.concurrency, "client": "bench.triton_load"})
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True, help="Triton's gRPC host:port")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", help="JSON from bench.prompts; without it one short prompt is reused")
    parser.add_argument("--max-tokens", type=int, default=0, help="0: each prompt's own output length")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=0, help="0: one per prompt")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds; overrides --requests")
    parser.add_argument("--warmups", type=int, default=0)
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    summary = asyncio.run(run(args))
    Path(args.out).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
