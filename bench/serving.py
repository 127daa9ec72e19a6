"""Part 1, end to end on the same engine and load: A (gateway -> Triton -> our backend -> vLLM) and B
(Triton over gRPC, A's floor) against one running local stack, then C (`vllm serve`) alone, since two
engines never share the 2 cores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.engine_config import differences
from bench.jobs import run_json, run_module
from localstack.net import free_port
from bench.proc_stats import cpu_by_role
from bench.prompts import Workload
from bench.vllm_bench import run_vllm_bench
from bench.vllm_serve import VllmServer
from localstack.paths import DEFAULT_MODEL_NAME
from localstack.stack import LocalStack, StackConfig

BACKENDS = ("openai", "openai-chat")


@dataclass
class ServingConfig:
    out_dir: Path
    workload: Workload
    systems: set[str] = field(default_factory=lambda: {"A", "B", "C"})
    concurrencies: list[int] = field(default_factory=lambda: [1, 8, 32, 64])
    prompts_per_concurrency: int = 4
    min_prompts: int = 16
    num_prompts: int | None = None  # fixed count for every level, else a few times the concurrency
    warmups: int | None = None  # per run; None: one request per concurrent slot
    nonstream_concurrency: int = 64  # 0 skips the streaming/non-streaming check
    ttft_pairs: int = 400  # A-then-B pairs, one request at a time, for the gateway's added TTFT; 0 skips
    model: str = DEFAULT_MODEL_NAME

    def prompts_for(self, concurrency: int) -> int:
        return self.num_prompts or max(self.min_prompts, self.prompts_per_concurrency * concurrency)

    def warmups_for(self, concurrency: int) -> int:
        return concurrency if self.warmups is None else self.warmups


class Serving:
    def __init__(self, config: ServingConfig, log: Callable[[str], None] = print) -> None:
        self.config = config
        self.log = log
        self.runs: list[dict[str, Any]] = []
        self.ttft_pairs: dict[str, Any] | None = None
        self._prompt_files: dict[int, Path] = {}
        self._roles: dict[str, int] = {}  # the serving processes whose CPU each run reads, by role

    def _measured(self, load: Callable[[], dict[str, Any]], unrecorded: int) -> dict[str, Any]:
        """Runs one load and adds the CPU each role spent per output token meanwhile, in µs. The load's
        `unrecorded` warm-up requests spend CPU too: counted as producing as many tokens as the others."""
        before = cpu_by_role(self._roles)
        result = load()
        after = cpu_by_role(self._roles)
        completed = result.get("completed") or 0
        if completed and result.get("total_output_tokens"):
            tokens = result["total_output_tokens"] * (completed + unrecorded) / completed
            result["cpu_us_per_token"] = {role: (after[role] - before[role]) * 1e6 / tokens for role in after}
        return result

    def prompts(self, count: int) -> Path:
        """The random dataset's first `count` prompts, exactly as `vllm bench serve` makes them."""
        if count not in self._prompt_files:
            path = self.config.out_dir / f"prompts-{count}.json"
            argv = [str(path), *self.config.workload.dataset_argv(count)]
            run_module("bench.prompts", argv, path.with_suffix(".log"), 600)
            self._prompt_files[count] = path
        return self._prompt_files[count]

    def _add(self, result: dict[str, Any], backend: str) -> None:
        # Per-request lists stay in the run's own file; the report keeps the figures.
        result = {k: v for k, v in result.items() if not isinstance(v, list) or k == "first_errors"}
        result["backend"] = backend
        self.runs.append(result)
        ttft = result.get("p50_ttft_ms")
        self.log(
            f"  {result['system']} {backend:<14} c={result['max_concurrency']:<3} "
            f"{result['output_throughput']:8.1f} tok/s  TTFT p50 {'-' if ttft is None else f'{ttft:.1f}':>8} ms  "
            f"req/s {result['request_throughput']:.2f}  failed {result.get('failed', 0)}"
        )

    def _vllm_bench(self, system: str, base_url: str, concurrency: int) -> None:
        cfg = self.config
        for backend in BACKENDS:
            result = self._measured(
                lambda: run_vllm_bench(
                    system, base_url, cfg.model, backend, cfg.workload, concurrency,
                    cfg.prompts_for(concurrency), cfg.warmups_for(concurrency), cfg.out_dir,
                ),  # fmt: skip
                cfg.warmups_for(concurrency) + 1,  # and vllm bench serve's own first test request
            )
            self._add(result, backend)

    def _triton_direct(self, grpc_url: str, concurrency: int) -> None:
        count = self.config.prompts_for(concurrency)
        args = [
            "--url", grpc_url, "--model", self.config.model, "--prompts", str(self.prompts(count)),
            "--concurrency", str(concurrency), "--warmups", str(self.config.warmups_for(concurrency)),
        ]  # fmt: skip
        out = self.config.out_dir / f"B-grpc-c{concurrency}.json"
        warmups = self.config.warmups_for(concurrency)
        self._add(self._measured(lambda: run_json("bench.triton_load", args, out, 3600), warmups), "triton-grpc")

    def _stream_vs_plain(self, base_url: str) -> None:
        """The same prompts with and without `stream`, from our own client (`vllm bench serve` only streams)."""
        concurrency = self.config.nonstream_concurrency
        prompts = self.prompts(self.config.prompts_for(concurrency))
        warmups = self.config.warmups_for(concurrency)
        for stream in (True, False):
            name = "http-stream" if stream else "http-nonstream"
            args = [
                "--url", base_url, "--model", self.config.model, "--prompts", str(prompts),
                "--concurrency", str(concurrency), "--warmups", str(warmups),
                "--stream" if stream else "--no-stream", "--include-usage",
            ]  # fmt: skip
            out = self.config.out_dir / f"A-{name}-c{concurrency}.json"
            result = self._measured(lambda: run_json("bench.http_load", args, out, 3600), warmups)
            result["system"] = "A"
            self._add(result, name)

    def _paired_ttft(self, base_url: str, grpc_url: str) -> None:
        cfg = self.config
        args = [
            "--gateway-url", base_url, "--grpc-url", grpc_url, "--model", cfg.model,
            "--prompts", str(self.prompts(cfg.prompts_for(1))), "--pairs", str(cfg.ttft_pairs),
        ]  # fmt: skip
        self.ttft_pairs = run_json("bench.ttft_pairs", args, cfg.out_dir / "ttft-pairs.json", 1800)
        p = self.ttft_pairs
        self.log(
            f"  A-B TTFT, {p['pairs']} pairs one at a time: {p['diff_median_ms']:.2f} ms "
            f"(A p50 {p['a_ttft_p50_ms']:.1f} ms, B p50 {p['b_ttft_p50_ms']:.1f} ms)"
        )

    def run_triton_side(self) -> None:
        """A and B, side by side per concurrency, on one local stack."""
        cfg = self.config
        stack_config = StackConfig(
            run_dir=cfg.out_dir / "stack",
            http_port=free_port(),
            grpc_port=free_port(),
            metrics_port=free_port(),
            gateway_port=free_port(),
        )
        self.log(f"starting the local stack (Triton + our backend + vLLM, and the gateway) in {stack_config.run_dir}")
        with LocalStack(stack_config) as stack:
            grpc_url = f"127.0.0.1:{stack_config.grpc_port}"
            assert stack.gateway is not None and stack.triton is not None
            self._roles = {"gateway": stack.gateway.pid, "triton": stack.triton.pid}
            for concurrency in cfg.concurrencies:
                if "A" in cfg.systems:
                    self._vllm_bench("A", stack.gateway_url, concurrency)
                if "B" in cfg.systems:
                    self._triton_direct(grpc_url, concurrency)
            if "A" in cfg.systems and cfg.nonstream_concurrency:
                self._stream_vs_plain(stack.gateway_url)
            if {"A", "B"} <= cfg.systems and cfg.ttft_pairs:
                self._paired_ttft(stack.gateway_url, grpc_url)
        self.log("local stack stopped")

    def run_vllm_side(self) -> None:
        cfg = self.config
        self.log("starting vllm serve (the engine's first start compiles for a minute or two)")
        with VllmServer(cfg.workload.model_dir, free_port(), cfg.out_dir / "vllm-serve.log") as server:
            assert server.service is not None
            self._roles = {"vllm serve": server.service.pid}
            for concurrency in cfg.concurrencies:
                self._vllm_bench("C", server.url, concurrency)
        self.log("vllm serve stopped")

    def engine_config(self) -> dict[str, Any]:
        """The engine configuration A's and C's engines logged, and the fields where they differ."""
        return differences(self.config.out_dir / "stack" / "triton.log", self.config.out_dir / "vllm-serve.log")

    def run(self) -> list[dict[str, Any]]:
        self.config.out_dir.mkdir(parents=True, exist_ok=True)
        if self.config.systems & {"A", "B"}:
            self.run_triton_side()
        if "C" in self.config.systems:
            self.run_vllm_side()
        return self.runs
