"""E: the engine's own ceiling, with nothing in front of it. vLLM's offline `LLM.generate` on the same
model folder and engine arguments as A's and C's engines, all prompts at once, so the scheduler batches
as many as it allows and no server, client or detokenizing stream sits between the engine and the count.

Run in its own process (vLLM is imported only there):
`python -m bench.engine_ceiling --model-dir DIR --prompts p.json --max-tokens 256 --memory-share 0.13 --out r.json`
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

from bench.prompts import load_prompts


def _cpu_s() -> float:
    """user + system seconds of this process and of the children it waited for (none: vLLM's engine core
    runs until the end), so the figure is the driver's own."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def generate(args: argparse.Namespace) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.config import SchedulerConfig

    from localstack.model_repo import cpu_engine_args

    # The scheduler's limits A's engine (AsyncLLM) and C's (the API server) take on a CPU; `LLM` alone would
    # take 256 sequences and 4096 tokens per step, and so measure another engine.
    limits = {
        "max_num_seqs": SchedulerConfig.DEFAULT_MAX_NUM_SEQS,
        "max_num_batched_tokens": SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS,
    }
    engine_args = {**cpu_engine_args(args.model_dir, args.memory_share), **limits}
    llm = LLM(**engine_args)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0, ignore_eos=True)
    prompts = [row["prompt"] for row in load_prompts(args.prompts)]
    llm.generate(prompts[: args.warmups], params, use_tqdm=False)  # compiled shapes and caches warm
    cpu0, start = _cpu_s(), time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    wall, cpu = time.perf_counter() - start, _cpu_s() - cpu0
    tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
    return {
        "system": "E",
        "client": "LLM.generate",
        "completed": len(outputs),
        "total_output_tokens": tokens,
        "duration": wall,
        "output_throughput": tokens / wall,
        "driver_cpu_us_per_token": cpu * 1e6 / tokens if tokens else None,
        "engine_args": {k: str(v) for k, v in engine_args.items()},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--prompts", type=Path, required=True, help="JSON from bench.prompts")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--memory-share", type=float, required=True, help="as A's and C's engines")
    parser.add_argument("--warmups", type=int, default=8, help="prompts generated once before the timed run")
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    args.out.write_text(json.dumps(generate(args), indent=2))


if __name__ == "__main__":
    main()
