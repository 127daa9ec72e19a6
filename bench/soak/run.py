"""The soak's shell: a stack of its own on the fast model (its engine restarted when it dies), the load, one
engine kill and one Triton restart during it, then the after-checks.

`python -m bench.soak` (`make soak`): SOAK_SECONDS of load (600 unless set), SOAK_CLIENTS clients (128),
SOAK_MAX_TOKENS tokens per request (128).
Exits 1 when a request failed or an after-check did not pass.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.soak import report
from bench.soak.driver import LoadPlan, one_request, run_load
from bench.soak.outcomes import Exchange, Verdict, classify
from localstack.model_choice import resolve_model
from localstack.model_repo import write_model_repository
from localstack.net import free_port
from localstack.paths import FAST_MODEL_NAME, REPO_ROOT, CachePaths, default_cache_dir
from localstack.stack import LocalStack
from localstack.stack_config import StackConfig
from localstack.processes import stray_processes

# The gateway's total deadline during the soak: short, so that a request held by a fault ends in time.
GATEWAY_REQUEST_TIMEOUT_S = 60
# What the model's config adds to the checked-in one: a dead engine is restarted in place.
RESTART_PARAMETER = 'parameters { key: "RESTART_UNHEALTHY_ENGINE" value: { string_value: "true" } }\n'
# Tokens per request. The fast engine generates 32 in a fraction of a second, so few streams are mid-way when a
# fault hits; 128 keeps enough of them open to see error events (13 at 256 tokens and 32 clients, 1 at 32).
SOAK_MAX_TOKENS = 128
# How long a fault may keep the model away before the soak gives up on it.
RECOVERY_TIMEOUT_S = 300.0


@dataclass
class SoakResult:
    exchanges: list[Exchange]
    verdicts: list[Verdict]
    faults: list[str]
    checks: list[report.Check]
    seconds: float

    def summary(self) -> str:
        return report.summary(self.exchanges, self.verdicts, self.faults, self.checks, self.seconds)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


def soak_config(run_dir: Path) -> StackConfig:
    """The fast model with REPORT_CUSTOM_METRICS, ENABLE_VLLM_HEALTH_CHECK (checked in) and
    RESTART_UNHEALTHY_ENGINE, in a repository of the run's own (a Triton restart reloads it as it is)."""
    model = resolve_model(FAST_MODEL_NAME, CachePaths(default_cache_dir()))
    repository = write_model_repository(run_dir / "soak_repository", model.folder, model.name, model.memory_share)
    with open(repository / model.name / "config.pbtxt", "a") as config:
        config.write(RESTART_PARAMETER)
    return StackConfig.serving_repository(
        repository,
        run_dir=run_dir,
        keep_off_engine_cores=model.keep_off_engine_cores,
        gateway_env={"GATEWAY_REQUEST_TIMEOUT_S": str(GATEWAY_REQUEST_TIMEOUT_S)},
        **{name: free_port() for name in ("http_port", "grpc_port", "metrics_port", "gateway_port")},
    )


@contextmanager
def soak_stack(run_dir: Path) -> Iterator[LocalStack]:
    """The stack, stopped afterwards (the caller checks `stray_processes(run_dir)`)."""
    stack = LocalStack(soak_config(run_dir))
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def _samples(text: str, name: str) -> float | None:
    """The sum of a metric's samples in Prometheus text; None when absent."""
    values = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]
    return sum(values) if values else None


def _gateway_tasks(stack: LocalStack) -> int | None:
    try:
        tasks = _samples(httpx.get(f"{stack.gateway_url}/metrics", timeout=10).text, "gateway_asyncio_tasks")
    except httpx.HTTPError:
        return None
    return None if tasks is None else int(tasks)


def _ready(stack: LocalStack) -> bool:
    try:
        return httpx.get(f"{stack.gateway_url}/health/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


async def _wait_ready(stack: LocalStack, want: bool, timeout_s: float) -> float | None:
    """Seconds until readiness is `want`; None if it never was within `timeout_s`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if await asyncio.to_thread(_ready, stack) == want:
            return time.monotonic() - started
        await asyncio.sleep(0.5)
    return None


def _seconds(took: float | None) -> str:
    return "never" if took is None else f"{took:.1f} s"


async def _faults(stack: LocalStack, seconds: float, started: float, log: list[str]) -> list[float | None]:
    """An engine kill at a fifth of the run, then a Triton restart at half of it (or once the engine is back).
    Returns how long the gateway took to be ready again after each."""

    def stamp(text: str) -> None:
        log.append(f"{time.monotonic() - started:6.1f} s  {text}")

    await asyncio.sleep(max(0.0, started + seconds * 0.2 - time.monotonic()))
    engines = stack.engine_processes()
    for process in engines:
        process.kill()
    stamp(f"killed the engine ({', '.join(str(p.pid) for p in engines) or 'none found'})")
    noticed = await _wait_ready(stack, False, 30)
    engine_back = await _wait_ready(stack, True, RECOVERY_TIMEOUT_S)
    stamp(f"gateway not ready after {_seconds(noticed)}, ready again after {_seconds(engine_back)} more")
    await asyncio.sleep(max(0.0, started + seconds * 0.5 - time.monotonic()))
    await asyncio.to_thread(stack.kill_triton)
    stamp("killed Triton")
    await asyncio.to_thread(stack.restart_triton)
    triton_back = await _wait_ready(stack, True, RECOVERY_TIMEOUT_S)
    stamp(f"Triton restarted; gateway ready again after {_seconds(triton_back)} more")
    return [engine_back, triton_back]


async def _engine_idle(stack: LocalStack, timeout_s: float = 5.0) -> report.Check:
    """Polls Triton's engine gauges until both are 0, for up to `timeout_s`."""
    started = time.monotonic()
    running = waiting = None
    while True:
        try:
            text = (await asyncio.to_thread(httpx.get, stack.triton_metrics_url, timeout=5)).text
            running = _samples(text, "vllm:num_requests_running")
            waiting = _samples(text, "vllm:num_requests_waiting")
        except httpx.HTTPError:
            pass
        took = time.monotonic() - started
        if (running == 0 and waiting == 0) or took > timeout_s:
            return report.engine_idle(running, waiting, took)
        await asyncio.sleep(0.25)


async def _trace_rss(gateway: psutil.Process, started: float, trace: list[str], every_s: float = 30.0) -> None:
    """The gateway's RSS through the run: a leak climbs steadily, a high-water mark levels off."""
    while True:
        trace.append(f"{time.monotonic() - started:.0f}s:{gateway.memory_info().rss / 2**20:.0f}")
        await asyncio.sleep(every_s)


async def soak(stack: LocalStack, seconds: float, clients: int, max_tokens: int = SOAK_MAX_TOKENS) -> SoakResult:
    """Load with two faults for at least `seconds` (longer if the faults take longer), then the checks."""
    plan = LoadPlan(
        stack.gateway_url, stack.config.model_name, clients, max_tokens, client_timeout_s=GATEWAY_REQUEST_TIMEOUT_S + 10
    )
    # The memory baseline once the allocator has settled under load, before the first fault.
    warm_up_s = max(10.0, seconds * 0.15)
    gateway = psutil.Process(stack.gateway.pid)
    # Warm-up alone, then the idle baseline of descriptors and tasks.
    async with aiohttp.ClientSession() as session:
        for endpoint in ("chat", "completions"):
            for stream in (False, True):
                await one_request(session, plan, endpoint, stream, None, "warm up")
    await asyncio.sleep(1.0)
    fds_before, tasks_before = gateway.num_fds(), await asyncio.to_thread(_gateway_tasks, stack)

    stop = asyncio.Event()
    faults: list[str] = []
    started = time.monotonic()
    load = asyncio.create_task(run_load(plan, stop))
    rss_trace: list[str] = []
    tracer = asyncio.create_task(_trace_rss(gateway, started, rss_trace))
    await asyncio.sleep(warm_up_s)
    rss_warm = gateway.memory_info().rss
    recoveries = await _faults(stack, seconds, started, faults)
    await asyncio.sleep(max(10.0, started + seconds - time.monotonic()))  # always some load after recovery
    stop.set()
    exchanges = await load
    tracer.cancel()
    took = time.monotonic() - started
    checks = [report.recovered(recoveries), await _engine_idle(stack)]
    await asyncio.sleep(2.0)  # connections closing on both sides
    checks += [
        report.rss_growth(rss_warm, gateway.memory_info().rss),
        report.back_to_baseline("open descriptors", fds_before, gateway.num_fds(), report.FD_SLACK),
        report.back_to_baseline(
            "asyncio tasks", tasks_before, await asyncio.to_thread(_gateway_tasks, stack), report.TASK_SLACK
        ),
    ]
    verdicts = [classify(exchange) for exchange in exchanges]
    faults.append("gateway RSS (MiB) every 30 s: " + " ".join(rss_trace))
    return SoakResult(exchanges, verdicts, faults, [report.no_failures(verdicts), *checks], took)


def soak_with_stack(run_dir: Path, seconds: float, clients: int, max_tokens: int = SOAK_MAX_TOKENS) -> SoakResult:
    """A stack of its own, the soak, then the stack stopped and checked for orphans."""
    with soak_stack(run_dir) as stack:
        result = asyncio.run(soak(stack, seconds, clients, max_tokens))
    result.checks.append(report.no_orphans(stray_processes(run_dir)))
    return result


def main() -> None:
    seconds = float(os.environ.get("SOAK_SECONDS", "600"))
    clients = int(os.environ.get("SOAK_CLIENTS", "128"))
    max_tokens = int(os.environ.get("SOAK_MAX_TOKENS", str(SOAK_MAX_TOKENS)))
    run_dir = REPO_ROOT / ".run" / time.strftime("soak-%Y%m%d-%H%M%S")
    print(f"soak: a stack in {run_dir} (its logs stay there); {clients} clients for {seconds:.0f} s", flush=True)
    result = soak_with_stack(run_dir, seconds, clients, max_tokens)
    print(result.summary())
    sys.exit(0 if result.passed else 1)
