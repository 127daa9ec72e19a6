"""Part 2, the gateway's own cost: the gateway in front of a Triton model that costs nothing, against a
bare Starlette app streaming the same chunks (the floor), measured by CPU seconds of each server process."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.fake_upstream import SLOW_MODEL_NAME, FakeUpstreamStack
from bench.jobs import bench_env, run_json
from localstack.net import free_port, http_ok
from bench.proc_stats import Usage, Watch
from localstack.paths import DEFAULT_MODEL_NAME, REPO_ROOT
from localstack.processes import Service, wait_until
from localstack.stack_config import StackConfig


@dataclass
class CostConfig:
    out_dir: Path
    streams: int = 64
    max_tokens: int = 256
    duration_s: float = 10.0
    rounds: int = 3  # gateway and floor take turns, so the machine's drift hits both alike
    warmup_s: float = 1.0
    latency_requests: int = 20
    rss_streams: int = 256
    rss_max_tokens: int = 60
    slow_token_delay_s: float = 0.1  # rss_max_tokens x this = how long the RSS streams stay open
    workers: tuple[int, ...] = (1,)  # GATEWAY_WORKERS to measure apart; just (1,): the main runs suffice


def median_run(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run whose `key` is the median (the lower middle one, for an even count)."""
    ordered = sorted(runs, key=lambda run: run[key])
    return ordered[(len(ordered) - 1) // 2]


def _cost(summary: dict[str, Any], usage: Usage) -> dict[str, Any]:
    chunks = summary["chunks"]
    summary.update(
        {
            "server_cpu_s": usage.cpu_s,
            "chunks_per_cpu_s": chunks / usage.cpu_s if usage.cpu_s else 0.0,
            "cpu_us_per_chunk": usage.cpu_s * 1e6 / chunks if chunks else 0.0,
            "rss_start_mb": usage.rss_start_mb,
            "rss_peak_mb": usage.rss_peak_mb,
        }
    )
    return summary


class GatewayCost:
    def __init__(self, config: CostConfig, log: Callable[[str], None] = print) -> None:
        self.config = config
        self.log = log

    def _http(self, name: str, url: str, pid: int, concurrency: int, model: str = DEFAULT_MODEL_NAME,
              max_tokens: int | None = None, duration_s: float = 0.0, requests: int = 0,
              warmup: bool = True, with_children: bool = False, usage: bool = False) -> dict[str, Any]:  # fmt: skip
        """One measured HTTP load, after a short unmeasured warm-up; `with_children` counts the server's child
        processes too (uvicorn's workers), `usage` counts tokens from the usage chunk rather than chunks."""
        cfg = self.config
        common = ["--url", url, "--model", model, "--concurrency", str(concurrency),
                  "--max-tokens", str(max_tokens or cfg.max_tokens)]  # fmt: skip
        common += ["--include-usage"] if usage else []
        if warmup and cfg.warmup_s:
            run_json(
                "bench.http_load", [*common, "--duration", str(cfg.warmup_s)], cfg.out_dir / f"{name}-warmup.json", 600
            )
        load = ["--duration", str(duration_s)] if duration_s else ["--requests", str(requests)]
        with Watch(pid, with_children=with_children) as watch:
            summary = run_json("bench.http_load", [*common, *load], cfg.out_dir / f"{name}.json", 900)
        return _cost(summary, watch.usage)

    def _grpc(self, name: str, grpc_url: str, pid: int, concurrency: int, duration_s: float = 0.0,
              requests: int = 0) -> dict[str, Any]:  # fmt: skip
        cfg = self.config
        common = ["--url", grpc_url, "--concurrency", str(concurrency), "--max-tokens", str(cfg.max_tokens)]
        if cfg.warmup_s:
            run_json(
                "bench.triton_load",
                [*common, "--duration", str(cfg.warmup_s)],
                cfg.out_dir / f"{name}-warmup.json",
                600,
            )
        load = ["--duration", str(duration_s)] if duration_s else ["--requests", str(requests)]
        with Watch(pid, with_children=True) as watch:
            summary = run_json("bench.triton_load", [*common, *load], cfg.out_dir / f"{name}.json", 900)
        return _cost(summary, watch.usage)

    def _grpc_read(self, name: str, grpc_url: str, concurrency: int, duration_s: float) -> dict[str, Any]:
        """The gateway's Triton client alone, on the same streams; it measures its own CPU."""
        cfg = self.config
        args = ["--url", grpc_url, "--concurrency", str(concurrency), "--max-tokens", str(cfg.max_tokens),
                "--duration", str(duration_s), "--warmup", str(cfg.warmup_s)]  # fmt: skip
        return run_json("bench.grpc_read", args, cfg.out_dir / f"{name}.json", 900)

    def _start_floor(self) -> tuple[Service, str]:
        port = free_port()
        argv = [sys.executable, "-m", "uvicorn", "bench.floor_app:app", "--host", "127.0.0.1", "--port", str(port),
                "--log-level", "warning", "--no-access-log"]  # fmt: skip
        floor = Service("floor", argv, bench_env(), self.config.out_dir / "floor.log", cwd=REPO_ROOT)
        url = f"http://127.0.0.1:{port}"
        if not wait_until(lambda: http_ok(f"{url}/health/ready"), 30, 0.2, floor):
            tail = floor.log_tail()
            floor.stop()
            raise RuntimeError(f"the floor app did not start:\n{tail}")
        return floor, url

    def _workers(self, stack: FakeUpstreamStack, workers: int) -> dict[str, Any]:
        """A gateway of its own with GATEWAY_WORKERS=`workers`, under the main runs' load; its CPU is the sum
        over uvicorn's supervisor and its worker processes. Tokens come from the usage chunk: the gateway may
        merge several tokens into one chunk."""
        cfg = self.config
        port = free_port()
        service = stack.gateway_service(f"gateway-w{workers}", port, {"GATEWAY_WORKERS": str(workers)})
        url = f"http://{stack.config.gateway_host}:{port}"
        try:
            if not wait_until(lambda: http_ok(f"{url}/health/ready"), 60, 0.5, service):
                raise RuntimeError(f"the gateway with {workers} workers did not start:\n{service.log_tail()}")
            run = self._http(f"gateway-w{workers}", url, service.pid, cfg.streams, duration_s=cfg.duration_s,
                             with_children=True, usage=True)  # fmt: skip
        finally:
            service.stop()
        tokens = run["total_output_tokens"]
        run["cpu_us_per_token"] = run["server_cpu_s"] * 1e6 / tokens if tokens else None
        self.log(f"  {workers} workers: {run['output_throughput']:,.0f} tokens/s, {run['cpu_us_per_token']:.1f} "
                 f"CPU µs/token, {tokens / max(1, run['chunks']):.2f} tokens/chunk")  # fmt: skip
        return {"workers": workers, **run}

    def run(self) -> dict[str, Any]:
        cfg = self.config
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        stack_config = StackConfig(
            run_dir=cfg.out_dir / "fake_stack",
            http_port=free_port(),
            grpc_port=free_port(),
            metrics_port=free_port(),
            gateway_port=free_port(),
            start_timeout_s=120.0,
        )
        self.log(f"starting Triton with the fake model, the gateway and the floor app in {cfg.out_dir}")
        results: dict[str, Any] = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(cfg).items()}}
        with FakeUpstreamStack(stack_config, cfg.slow_token_delay_s) as stack:
            floor, floor_url = self._start_floor()
            try:
                gateway_pid, triton_pid = stack.gateway.pid, stack.triton.pid
                grpc_url = f"127.0.0.1:{stack_config.grpc_port}"
                n, d = cfg.streams, cfg.duration_s
                self.log(
                    f"  throughput: {n} streams x {cfg.max_tokens} chunks for {d:g} s each, gateway and floor "
                    f"taking turns for {cfg.rounds} rounds, then the gateway's gRPC client alone"
                )
                servers = [("gateway", stack.gateway_url, gateway_pid), ("floor", floor_url, floor.pid)]
                rounds = []
                for round_ in range(1, cfg.rounds + 1):
                    order = servers if round_ % 2 else servers[::-1]
                    runs = {
                        name: self._http(f"{name}-r{round_}", url, pid, n, duration_s=d) for name, url, pid in order
                    }
                    runs["grpc_read"] = self._grpc_read(f"grpc-read-r{round_}", grpc_url, n, d)
                    rounds.append({"round": round_, **runs})
                results["rounds"] = rounds
                for name in ("gateway", "floor"):
                    results[name] = median_run([r[name] for r in rounds], "chunks_per_cpu_s")
                results["grpc_read"] = median_run([r["grpc_read"] for r in rounds], "messages_per_cpu_s")
                results["triton_direct"] = self._grpc("triton-direct", grpc_url, triton_pid, n, duration_s=d)
                self.log(f"  latency: {cfg.latency_requests} requests one at a time")
                k = cfg.latency_requests
                results["latency_c1"] = {
                    "gateway": self._http("gateway-c1", stack.gateway_url, gateway_pid, 1, requests=k),
                    "floor": self._http("floor-c1", floor_url, floor.pid, 1, requests=k),
                    "triton_direct": self._grpc("triton-direct-c1", grpc_url, triton_pid, 1, requests=k),
                }
                self.log(f"  memory: {cfg.rss_streams} streams held open on the slow model")
                results["rss"] = self._http(
                    "gateway-rss", stack.gateway_url, gateway_pid, cfg.rss_streams, model=SLOW_MODEL_NAME,
                    max_tokens=cfg.rss_max_tokens, requests=cfg.rss_streams, warmup=False,
                )  # fmt: skip
                if cfg.workers != (1,):
                    self.log(f"  GATEWAY_WORKERS {', '.join(map(str, cfg.workers))}, each alone under the same load")
                    results["workers"] = [self._workers(stack, w) for w in cfg.workers]
            finally:
                floor.stop()
        self.log("fake stack and floor stopped")
        return results
