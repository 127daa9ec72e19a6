"""`python -m bench --part5`: A, C, C' and E on dummy-weight Llama shapes, on one CUDA host.

    python -m bench --part5                                   # 8B and 1B, A C C' E, 1 64 256 512 streams
    python -m bench --part5 --shapes 8b --systems A,C --concurrency 1,256   # a shorter run

Every server runs alone on the card, with the same engine arguments (servers.py). The report is rewritten
after every system (part5.md, part5.json under --out-dir), so that a run cut short still leaves what it measured,
and a later call with the same --out-dir measures only the shapes and systems still missing.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Callable

from bench.gpu_host import report, servers
from bench.gpu_host.shapes import SHAPES, write_dummy_model
from bench.prompts import Workload
from bench.vllm_bench import run_vllm_bench
from localstack.paths import REPO_ROOT, CachePaths, default_cache_dir

SYSTEMS = ("C", "C'", "A", "E")  # vllm serve first: it leaves the compile cache warm for the others
CPRIME_ARGS = ("--api-server-count", "4")
ENGINE_MAX_NUM_SEQS = 512


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _ints(text: str) -> list[int]:
    return [int(item) for item in _list(text)]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench --part5", description=__doc__.split("\n")[0])
    parser.add_argument("--part5", action="store_true")
    parser.add_argument("--shapes", type=_list, default=["8b", "1b"], help="of 8b,1b (default both)")
    parser.add_argument("--systems", type=_list, default=list(SYSTEMS), help="of A,C,C',E (default all)")
    parser.add_argument("--concurrency", type=_ints, default=[1, 64, 256, 512], help="streams (default 1,64,256,512)")
    parser.add_argument("--cprime-concurrency", type=_ints, default=[512], help="C''s streams (default 512)")
    parser.add_argument("--prompts-per-concurrency", type=int, default=2, help="prompts = this x streams (default 2)")
    parser.add_argument("--min-prompts", type=int, default=16, help="at least this many prompts a run (default 16)")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--tokenizer", type=Path, help="a model folder with tokenizer.json (default: the default model)")
    parser.add_argument("--triton-home", type=Path, default=Path("/tmp/triton"), help="Triton's server files")
    parser.add_argument("--gateway-workers", type=int, default=1)
    parser.add_argument(
        "--python-threads", type=int, default=servers.COMPOSE_PYTHON_THREADS,
        help=f"A: Triton's Python backend response threads (default compose's, {servers.COMPOSE_PYTHON_THREADS})",
    )  # fmt: skip
    parser.add_argument(
        "--backend-param", action="append", default=[], metavar="KEY=VALUE",
        help="A: a config.pbtxt parameter added to compose's (repeatable), e.g. RESPONSE_SENDER_THREADS=8",
    )  # fmt: skip
    parser.add_argument("--out-dir", type=Path, help="default: .run/bench/part5-<timestamp>")
    args = parser.parse_args(argv)
    unknown = set(args.shapes) - set(SHAPES) | set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown shape or system: {', '.join(sorted(unknown))}")
    if any("=" not in item for item in args.backend_param):
        parser.error("--backend-param takes KEY=VALUE")
    args.backend_param = dict(item.split("=", 1) for item in args.backend_param)
    return args


def cuda_card() -> str:
    """The card's name; exits with a clear message on a host without CUDA."""
    try:
        import torch
    except ImportError:
        sys.exit("part 5 needs a CUDA host with PyTorch and vLLM's CUDA build; torch is not installed here")
    if not torch.cuda.is_available():
        sys.exit("part 5 needs a CUDA GPU (torch.cuda.is_available() is False here); on a CPU host use parts 1 to 4")
    props = torch.cuda.get_device_properties(0)
    return f"{props.name}, {props.total_memory / (1 << 30):.0f} GiB"


def _prompts(args: argparse.Namespace, concurrency: int) -> int:
    return max(args.min_prompts, args.prompts_per_concurrency * concurrency)


def engine_ceiling(args: argparse.Namespace, shape: str, model_dir: Path, out: Path) -> report.Run:
    """E: vLLM's offline throughput benchmark at 512 sequences, same shape, lengths and prompt count as 512
    streams get."""
    result = out / f"E-{shape}.json"
    argv = [
        "bench", "throughput", "--model", str(model_dir), "--load-format", "dummy", "--dataset-name", "random",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--num-prompts", str(_prompts(args, ENGINE_MAX_NUM_SEQS)), "--max-num-seqs", str(ENGINE_MAX_NUM_SEQS),
        "--max-model-len", str(servers.MAX_MODEL_LEN),
        "--gpu-memory-utilization", str(servers.GPU_MEMORY_UTILIZATION), "--output-json", str(result),
    ]  # fmt: skip
    with open(out / f"E-{shape}.log", "wb") as log:
        subprocess.run(
            [sys.executable, "-m", "vllm.entrypoints.cli.main", *argv],
            env=servers.host_env(), stdout=log, stderr=subprocess.STDOUT, check=True, timeout=900,
        )  # fmt: skip
    return report.run_from_throughput(shape, ENGINE_MAX_NUM_SEQS, json.loads(result.read_text()), args.output_len)


def _serve_runs(
    args: argparse.Namespace, shape: str, system: str, served: servers.Served, model_dir: Path, out: Path,
    runs: list[report.Run], save: Callable[[], None],
) -> None:  # fmt: skip
    """Each level in turn, appended to `runs` and saved as soon as it is measured."""
    workload = Workload(model_dir, args.input_len, args.output_len)
    levels = args.cprime_concurrency if system == "C'" else args.concurrency
    for concurrency in levels:
        result = run_vllm_bench(
            f"{system.replace(chr(39), 'p')}-{shape}", served.base_url, served.model, "openai", workload,
            concurrency, _prompts(args, concurrency), max(1, concurrency // 4), out, timeout_s=900,
        )  # fmt: skip
        runs.append(report.run_from_serve(shape, system, concurrency, result))
        save()
        print(f"[part5] {shape} {system} c={concurrency}: {runs[-1].output_tok_s:,.0f} tok/s", flush=True)


def _earlier_runs(out: Path) -> list[report.Run]:
    """The runs an earlier call left in the same --out-dir: a run is measured once, and a part 5 spread over
    several calls (a host that limits one call's time) reports as one."""
    saved = out / "part5.json"
    if not saved.is_file():
        return []
    return [report.Run(**run) for run in json.loads(saved.read_text())["runs"]]


def _server(
    args: argparse.Namespace, system: str, model_dir: Path, name: str, logs: Path
) -> AbstractContextManager[servers.Served]:
    if system == "A":
        return servers.stack(
            model_dir, name, logs, args.triton_home, args.gateway_workers, args.python_threads, args.backend_param
        )
    return servers.vllm_serve(model_dir, name, logs, CPRIME_ARGS if system == "C'" else ())


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    card = cuda_card()
    if "A" in args.systems and not (args.triton_home / "bin" / "tritonserver").is_file():
        sys.exit(f"no tritonserver under {args.triton_home} (--triton-home; ../shared/gpu-host/install.sh puts it there)")
    out = args.out_dir or REPO_ROOT / ".run" / "bench" / time.strftime("part5-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = args.tokenizer or CachePaths(default_cache_dir()).default_model_dir
    command = "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv)
    runs = _earlier_runs(out)

    def save() -> None:
        (out / "part5.json").write_text(json.dumps({"card": card, "runs": report.as_json(runs)}, indent=1) + "\n")
        (out / "part5.md").write_text(report.markdown(runs, card, command))

    for shape in args.shapes:
        model_dir = write_dummy_model(shape, tokenizer, out / "models" / f"llama-{shape}")
        for system in [s for s in SYSTEMS if s in args.systems]:
            if any((r.shape, r.system) == (shape, system) for r in runs):
                print(f"[part5] {shape} {system}: measured earlier in {out}, kept", flush=True)
                continue
            started = time.monotonic()
            try:
                if system == "E":
                    runs.append(engine_ceiling(args, shape, model_dir, out))
                else:
                    logs = out / f"{system.replace(chr(39), 'p')}-{shape}"
                    with _server(args, system, model_dir, f"llama-{shape}", logs) as served:
                        _serve_runs(args, shape, system, served, model_dir, logs, runs, save)
            except Exception as exc:  # one system failing leaves the others' figures
                print(f"[part5] {shape} {system} failed: {exc}", file=sys.stderr, flush=True)
            print(f"[part5] {shape} {system} took {time.monotonic() - started:.0f} s", flush=True)
            save()
    save()
    print((out / "part5.md").read_text())
