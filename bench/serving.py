"""Part 1, end to end on the same engine and load: A (gateway -> Triton -> our backend -> vLLM), B (Triton
over gRPC, A's floor) and C (`vllm serve`). The local stack and `vllm serve` run side by side, each engine
with half the usual memory, and only one of them has load at a time: A and C take turns at each
concurrency, several rounds at the levels the targets read, so that drift on a shared machine reaches both
alike and the spread between rounds shows."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
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
from localstack.model_repo import ENGINE_MEMORY_SHARE
from localstack.stack import LocalStack
from localstack.stack_config import StackConfig

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
    rounds: int = 3  # A and C taking turns at each of `round_concurrencies`; one round elsewhere
    round_concurrencies: tuple[int, ...] = (32, 64)
    model: str = DEFAULT_MODEL_NAME
    save_detailed: bool = False  # vllm bench serve keeps per-request lists (ITLs, output lengths) in its file

    def rounds_for(self, concurrency: int) -> int:
        return self.rounds if concurrency in self.round_concurrencies else 1

    @property
    def memory_share(self) -> float:
        """Each engine's memory share: half the usual when both engines are up."""
        both = bool(self.systems & {"A", "B"}) and "C" in self.systems
        return ENGINE_MEMORY_SHARE / 2 if both else ENGINE_MEMORY_SHARE

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
        self._roles: dict[str, dict[str, int]] = {}  # per system, the serving processes whose CPU its runs read

    def _measured(self, system: str, load: Callable[[], dict[str, Any]], unrecorded: int) -> dict[str, Any]:
        """Runs one load and adds the CPU each role spent per output token meanwhile, in µs. The load's
        `unrecorded` warm-up requests spend CPU too: counted as producing as many tokens as the others."""
        roles = self._roles[system]
        before = cpu_by_role(roles)
        result = load()
        after = cpu_by_role(roles)
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

    def _add(self, result: dict[str, Any], backend: str, round_: int = 0) -> None:
        # Per-request lists stay in the run's own file; the report keeps the figures.
        result = {k: v for k, v in result.items() if not isinstance(v, list) or k == "first_errors"}
        result["backend"] = backend
        result["round"] = round_
        self.runs.append(result)
        ttft = result.get("p50_ttft_ms")
        self.log(
            f"  {result['system']} {backend:<14} c={result['max_concurrency']:<3} r{round_} "
            f"{result['output_throughput']:8.1f} tok/s  TTFT p50 {'-' if ttft is None else f'{ttft:.1f}':>8} ms  "
            f"req/s {result['request_throughput']:.2f}  failed {result.get('failed', 0)}"
        )

    def _vllm_bench(self, system: str, base_url: str, concurrency: int, round_: int) -> None:
        cfg = self.config
        for backend in BACKENDS:
            result = self._measured(
                system,
                lambda: run_vllm_bench(
                    system, base_url, cfg.model, backend, cfg.workload, concurrency,
                    cfg.prompts_for(concurrency), cfg.warmups_for(concurrency), cfg.out_dir, round_,
                    detailed=cfg.save_detailed,
                ),  # fmt: skip
                cfg.warmups_for(concurrency) + 1,  # and vllm bench serve's own first test request
            )
            self._add(result, backend, round_)

    def _triton_direct(self, grpc_url: str, concurrency: int) -> None:
        count = self.config.prompts_for(concurrency)
        args = [
            "--url", grpc_url, "--model", self.config.model, "--prompts", str(self.prompts(count)),
            "--concurrency", str(concurrency), "--warmups", str(self.config.warmups_for(concurrency)),
        ]  # fmt: skip
        out = self.config.out_dir / f"B-grpc-c{concurrency}.json"
        warmups = self.config.warmups_for(concurrency)
        self._add(self._measured("B", lambda: run_json("bench.triton_load", args, out, 3600), warmups), "triton-grpc")

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
            result = self._measured("A", lambda: run_json("bench.http_load", args, out, 3600), warmups)
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

    def _stack_config(self) -> StackConfig:
        return StackConfig(
            run_dir=self.config.out_dir / "stack",
            http_port=free_port(),
            grpc_port=free_port(),
            metrics_port=free_port(),
            gateway_port=free_port(),
            engine_memory_share=self.config.memory_share,
        )

    def _stack(self) -> LocalStack:
        stack_config = self._stack_config()
        self.log(f"starting the local stack (Triton + our backend + vLLM, and the gateway) in {stack_config.run_dir}")
        return LocalStack(stack_config)

    def _vllm_serve(self) -> VllmServer:
        cfg = self.config
        self.log("starting vllm serve (the engine's first start compiles for a minute or two)")
        return VllmServer(cfg.workload.model_dir, free_port(), cfg.out_dir / "vllm-serve.log", cfg.memory_share)

    def _levels(self, stack: LocalStack | None, server: VllmServer | None) -> None:
        """Every concurrency level: A and C taking turns (A first in even rounds), then B once."""
        cfg = self.config
        for concurrency in cfg.concurrencies:
            for round_ in range(cfg.rounds_for(concurrency)):
                turns = ("A", "C") if round_ % 2 == 0 else ("C", "A")
                for system in turns:
                    if system == "A" and stack is not None and "A" in cfg.systems:
                        self._vllm_bench("A", stack.gateway_url, concurrency, round_)
                    if system == "C" and server is not None:
                        self._vllm_bench("C", server.url, concurrency, round_)
            if stack is not None and "B" in cfg.systems:
                self._triton_direct(f"127.0.0.1:{stack.config.grpc_port}", concurrency)

    def run(self) -> list[dict[str, Any]]:
        cfg = self.config
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        with ExitStack() as running:
            stack = running.enter_context(self._stack()) if cfg.systems & {"A", "B"} else None
            server = running.enter_context(self._vllm_serve()) if "C" in cfg.systems else None
            if stack is not None:
                assert stack.gateway is not None and stack.triton is not None
                self._roles["A"] = self._roles["B"] = {"gateway": stack.gateway.pid, "triton": stack.triton.pid}
            if server is not None:
                assert server.service is not None
                self._roles["C"] = {"vllm serve": server.service.pid}
            self._levels(stack, server)
            if stack is not None and "A" in cfg.systems and cfg.nonstream_concurrency:
                self._stream_vs_plain(stack.gateway_url)
            if stack is not None and {"A", "B"} <= cfg.systems and cfg.ttft_pairs:
                self._paired_ttft(stack.gateway_url, f"127.0.0.1:{stack.config.grpc_port}")
        self.log("everything part 1 started is stopped")
        return self.runs

    def engine_config(self) -> dict[str, Any]:
        """The engine configuration A's and C's engines logged, and the fields where they differ."""
        return differences(self.config.out_dir / "stack" / "triton.log", self.config.out_dir / "vllm-serve.log")
