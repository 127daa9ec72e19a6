"""The exact prompts `vllm bench serve --dataset-name random` sends, written to a JSON file so our own
clients (B: Triton direct, and the non-streaming check) send the same ones.

Run as `python -m bench.prompts OUT.json <dataset argv>`; vLLM is imported only then.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Workload:
    """The random dataset's shape, shared by every system under test."""

    model_dir: Path
    input_len: int = 128
    output_len: int = 64
    seed: int = 0

    def dataset_argv(self, num_prompts: int) -> list[str]:
        return [
            "--dataset-name", "random",
            "--random-input-len", str(self.input_len),
            "--random-output-len", str(self.output_len),
            "--num-prompts", str(num_prompts),
            "--seed", str(self.seed),
            "--tokenizer", str(self.model_dir),
        ]  # fmt: skip


def load_prompts(path: Path) -> list[dict]:
    """[{"prompt": str, "prompt_len": int, "output_len": int}, ...]"""
    return json.loads(path.read_text())


def _write(out: Path, argv: list[str]) -> None:
    import numpy as np
    from vllm.benchmarks.datasets import get_samples
    from vllm.benchmarks.serve import add_cli_args
    from vllm.tokenizers import get_tokenizer
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args([*argv, "--model", "unused"])
    random.seed(args.seed)  # as vllm.benchmarks.serve.main_async does before sampling
    np.random.seed(args.seed)
    samples = get_samples(args, get_tokenizer(args.tokenizer))
    rows = [{"prompt": s.prompt, "prompt_len": s.prompt_len, "output_len": s.expected_output_len} for s in samples]
    out.write_text(json.dumps(rows))


if __name__ == "__main__":
    _write(Path(sys.argv[1]), sys.argv[2:])
