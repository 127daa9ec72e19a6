"""Part 3, GPU token rates: the serving paths of part 1 on a tiny random-weight Llama whose CPU engine steps
in milliseconds, so the engine makes tokens about as fast as a GPU would and what is measured is everything
in front of it. E is the engine alone (offline `LLM.generate`); A, B and C as in part 1; C' is `vllm serve`
with the `--stream-interval` A's engine uses, when it uses one. Every run also reads the CPU each process
on the path spent per output token, so each single-threaded stage's ceiling (10^6 / its µs per token)
shows which one a GPU would leave saturated."""

from __future__ import annotations

import json
import resource
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.jobs import run_json
from bench.proc_stats import cpu_by_process
from bench.prompts import Workload
from bench.serving import Serving, ServingConfig
from bench.vllm_bench import run_vllm_bench
from bench.vllm_serve import VllmServer
from localstack.model_choice import memory_share, resolve_model
from localstack.net import free_port
from localstack.paths import FAST_MODEL_NAME
from localstack.stack import LocalStack
from localstack.stack_config import StackConfig

SYSTEMS = ("E", "A", "B", "C", "C'")
CONCURRENCIES = (1, 64, 256, 512)
BUSY_SHARE = 0.01  # a process counts as one of its stage's busy processes above this share of the stage's CPU


@dataclass
class RatesConfig(ServingConfig):
    concurrencies: list[int] = field(default_factory=lambda: list(CONCURRENCIES))
    systems: set[str] = field(default_factory=lambda: set(SYSTEMS))
    prompts_per_concurrency: int = 2
    rounds: int = 1
    round_concurrencies: tuple[int, ...] = (256, 512)
    model: str = FAST_MODEL_NAME
    save_detailed: bool = True  # tokens per streamed chunk come from the per-request ITL lists
    stream_interval: int | None = None  # C''s; None: the one A's model.json gives, and no C' without one
    gateway_workers: int = 1
    placement: bool | None = None  # the stack's core placement (localstack.placement); None: the model's own

    @property
    def memory_share(self) -> float:
        """The model's own share for every engine (E, the stack's, C's, C''s), not split between them: the
        fast model's 0.05 already holds a million tokens of KV cache, and half of it would not hold the
        engine process itself (localstack.model_choice.memory_share)."""
        return memory_share(self.model)

    def warmups_for(self, concurrency: int) -> int:
        """A quarter of the slots by default: the engines are compiled already, and a full wave of 256-token
        warm-ups at 512 streams would cost as much as half the measured run."""
        return max(1, concurrency // 4) if self.warmups is None else self.warmups


def stream_interval_of(stack_dir: Path, model: str) -> int | None:
    """The `stream_interval` in the model.json the stack wrote for `model`, if any (1 counts as none)."""
    for path in stack_dir.rglob(f"{model}/1/model.json"):
        value = json.loads(path.read_text()).get("stream_interval")
        return int(value) if value and int(value) > 1 else None
    return None


def _children_cpu_s() -> float:
    """CPU seconds of this process's finished children: the load generators, each run to its end."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def split_by_stage(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], tokens: float
) -> dict[str, dict[str, float]]:
    """Per stage: µs per output token over all its processes, the busiest process's µs per token (what
    limits a stage of several processes), and how many of its processes were busy."""
    spent: dict[str, list[float]] = {}
    for pid, (kind, cpu_s) in after.items():
        spent.setdefault(kind, []).append(cpu_s - before.get(pid, (kind, 0.0))[1])
    stages = {}
    for kind, deltas in spent.items():
        total = sum(deltas)
        stages[kind] = {
            "us_per_token": total * 1e6 / tokens,
            "busiest_us_per_token": max(deltas) * 1e6 / tokens,
            "processes": sum(1 for d in deltas if total and d > BUSY_SHARE * total),
        }
    return stages


def tokens_per_chunk(result: dict[str, Any]) -> float | None:
    """Output tokens per streamed chunk as the client saw them: from `vllm bench serve`'s per-request ITL
    lists (one gap per chunk after the first), or our own clients' chunk count."""
    if "itls" in result and "output_lens" in result:
        done = [(n, len(itl)) for n, itl in zip(result["output_lens"], result["itls"]) if n]
        chunks = sum(gaps + 1 for _, gaps in done)
        return sum(n for n, _ in done) / chunks if chunks else None
    if result.get("chunks"):
        return result["total_output_tokens"] / result["chunks"]
    return None


class GpuRates(Serving):
    """Part 1's runs (its prompts, clients and turn-taking) on the fast model, with E and C' added and the
    CPU read per process rather than per server."""

    config: RatesConfig

    def __init__(self, config: RatesConfig, log: Callable[[str], None] = print) -> None:
        super().__init__(config, log)
        self.engine: dict[str, Any] | None = None
        self.stream_interval: int | None = config.stream_interval

    def _measured(self, system: str, load: Callable[[], dict[str, Any]], unrecorded: int) -> dict[str, Any]:
        """Runs one load; adds each stage's CPU per output token, and the load generator's own."""
        roles = self._roles[system]
        before, client0 = cpu_by_process(roles), _children_cpu_s()
        result = load()
        after, client = cpu_by_process(roles), _children_cpu_s() - client0
        completed = result.get("completed") or 0
        if completed and result.get("total_output_tokens"):
            tokens = result["total_output_tokens"] * (completed + unrecorded) / completed
            result["cpu"] = split_by_stage(before, after, tokens)
            result["cpu"]["client"] = {"us_per_token": client * 1e6 / tokens}
        result["tokens_per_chunk"] = tokens_per_chunk(result)
        return result

    def _stack_config(self) -> StackConfig:
        config = super()._stack_config()
        config.model_name = self.config.model
        config.model_dir = self.config.workload.model_dir
        config.gateway_env = {"GATEWAY_WORKERS": str(self.config.gateway_workers)}
        config.keep_off_engine_cores = (
            resolve_model(self.config.model, config.cache).keep_off_engine_cores
            if self.config.placement is None
            else self.config.placement
        )
        return config

    def _server(self, name: str, overrides: dict[str, Any]) -> VllmServer:
        cfg = self.config
        self.log(f"starting {name} on {cfg.workload.model_dir.name} with {overrides}")
        log_path = cfg.out_dir / f"{name}.log"
        return VllmServer(cfg.workload.model_dir, free_port(), log_path, cfg.memory_share, cfg.model, overrides)

    def _engine_alone(self) -> None:
        """E, before anything else starts: the engine's own rate on the largest level's prompts."""
        cfg = self.config
        count = cfg.prompts_for(max(cfg.concurrencies))
        args = ["--model-dir", str(cfg.workload.model_dir), "--prompts", str(self.prompts(count)),
                "--max-tokens", str(cfg.workload.output_len), "--memory-share", str(cfg.memory_share)]  # fmt: skip
        self.log(f"E: LLM.generate on {count} prompts, alone")
        self.engine = run_json("bench.engine_ceiling", args, cfg.out_dir / "E-generate.json", 3600)
        self.log(f"  E {self.engine['output_throughput']:8.1f} tok/s")

    def _turns(self, servers: dict[str, str], concurrency: int, round_: int) -> None:
        """A, C and C' one after the other, the order reversed every other level and round."""
        order = list(servers)
        if (round_ + self.config.concurrencies.index(concurrency)) % 2:
            order.reverse()
        for system in order:
            self._vllm_bench(system, servers[system], concurrency, round_)

    def _warm(self, servers: dict[str, str]) -> None:
        """One unmeasured load per server at the highest concurrency with short outputs, so that no measured
        run is the first to meet a full batch."""
        cfg = self.config
        top = max(cfg.concurrencies)
        short = Workload(cfg.workload.model_dir, cfg.workload.input_len, 16)
        for system, url in servers.items():
            self.log(f"  warming {system} up: {top} requests of 16 tokens at concurrency {top}")
            run_vllm_bench(f"{system}-warmup", url, cfg.model, "openai", short, top, top, 0, cfg.out_dir)

    def _levels_with(self, servers: dict[str, str], grpc_url: str | None) -> None:
        cfg = self.config
        self._warm(servers)
        for concurrency in cfg.concurrencies:
            for round_ in range(cfg.rounds_for(concurrency)):
                self._turns(servers, concurrency, round_)
            if grpc_url is not None and "B" in cfg.systems:
                self._triton_direct(grpc_url, concurrency)

    def _start_servers(self, running: ExitStack, stack: LocalStack | None) -> dict[str, str]:
        """vllm serve as C (vLLM's defaults) and as C' (with A's stream interval); system -> base URL."""
        cfg = self.config
        servers: dict[str, str] = {}
        if stack is not None and "A" in cfg.systems:
            servers["A"] = stack.gateway_url
        if stack is not None and self.stream_interval is None:
            self.stream_interval = stream_interval_of(stack.config.run_dir, cfg.model)
        plans = [("C", "vllm-serve", {"stream_interval": None})]
        if self.stream_interval:
            plans.append(("C'", "vllm-serve-interval", {"stream_interval": self.stream_interval}))
        for system, name, overrides in plans:
            if system in cfg.systems:
                server = running.enter_context(self._server(name, overrides))
                assert server.service is not None
                servers[system] = server.url
                self._roles[system] = {"api server": server.service.pid}
        return servers

    def run(self) -> list[dict[str, Any]]:
        cfg = self.config
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        if "E" in cfg.systems:
            self._engine_alone()
        with ExitStack() as running:
            stack = running.enter_context(self._stack()) if cfg.systems & {"A", "B"} else None
            if stack is not None:
                assert stack.gateway is not None and stack.triton is not None
                self._roles["A"] = self._roles["B"] = {"gateway": stack.gateway.pid, "triton": stack.triton.pid}
            servers = self._start_servers(running, stack)
            grpc_url = f"127.0.0.1:{stack.config.grpc_port}" if stack is not None else None
            self._levels_with(servers, grpc_url)
        self.log("everything part 3 started is stopped")
        return self.runs
