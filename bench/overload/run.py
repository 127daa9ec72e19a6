"""The overload benchmark's shell: a fast stack of its own whose gateway admits GATEWAY_MAX_IN_FLIGHT 8 and
queues GATEWAY_MAX_QUEUED 8, bursts at four times that, then the after-checks and the table.

`python -m bench.overload` (`make overload`): OVERLOAD_BURSTS bursts (5) of OVERLOAD_SIZE requests (64) of
OVERLOAD_MAX_TOKENS tokens (256: each burst keeps the gateway saturated for seconds). Exits 1 when a request ended neither complete nor refused with Retry-After, or
when something is left held afterwards. The latency targets are reported, not enforced.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.overload.bursts import BurstPlan, run_bursts
from bench.overload.figures import Figures, figures, gateway_refusal_durations, table
from localstack.model_choice import resolve_model
from localstack.net import free_port
from localstack.paths import FAST_MODEL_NAME, REPO_ROOT, CachePaths, default_cache_dir
from localstack.stack import LocalStack
from localstack.stack_config import StackConfig
from localstack.processes import stray_processes

MAX_IN_FLIGHT = 8
MAX_QUEUED = 8
# The gateway's admission for the run: small, so that a burst of 64 is four times what it takes in.
GATEWAY_ENV = {
    "GATEWAY_MAX_IN_FLIGHT": str(MAX_IN_FLIGHT),
    "GATEWAY_MAX_QUEUED": str(MAX_QUEUED),
    "GATEWAY_QUEUE_TIMEOUT_S": "10",
}
# What the gateway holds for requests: all 0 once the bursts are over.
HELD = ("gateway_admission_in_flight", "gateway_admission_queued", "gateway_requests_in_flight")


@dataclass
class OverloadResult:
    figures: Figures
    left_held: dict[str, float]  # gateway gauges and engine gauges still above 0 afterwards
    setup: str

    @property
    def passed(self) -> bool:
        return not self.figures.failures and not self.left_held

    def summary(self) -> str:
        lines = [table(self.figures, self.setup)]
        if self.figures.failures:
            lines.append(f"\nFAILED requests: {self.figures.failures}")
        lines.append(f"\nleft held afterwards: {self.left_held or 'nothing'}")
        return "\n".join(lines)


def _sums(url: str, names: tuple[str, ...]) -> dict[str, float]:
    sums = dict.fromkeys(names, 0.0)
    for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for sample in family.samples:
            if sample.name in sums:
                sums[sample.name] += sample.value
    return sums


def held(gateway_url: str, triton_metrics_url: str) -> dict[str, float]:
    """What is still held: the gateway's HELD gauges and the engines' running and waiting requests, above 0."""
    values = _sums(f"{gateway_url}/metrics", HELD)
    values.update(_sums(triton_metrics_url, ("vllm:num_requests_running", "vllm:num_requests_waiting")))
    return {name: value for name, value in values.items() if value}


def left_held(gateway_url: str, triton_metrics_url: str, timeout_s: float = 10.0) -> dict[str, float]:
    """Waits up to `timeout_s` for nothing to be held; returns what still is."""
    deadline = time.monotonic() + timeout_s
    while (still := held(gateway_url, triton_metrics_url)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return still


def overload(gateway_url: str, triton_metrics_url: str, model: str, log_path: Path, plan: BurstPlan) -> OverloadResult:
    """Bursts against a gateway already up with GATEWAY_ENV, then what was measured and what is left held."""
    warm_up = {"model": model, "prompt": "Hi", "max_tokens": 4}
    httpx.post(f"{gateway_url}/v1/completions", json=warm_up, timeout=120).raise_for_status()
    log_start = log_path.stat().st_size if log_path.exists() else 0
    attempts, liveness = asyncio.run(run_bursts(plan))
    with open(log_path, errors="replace") as log:
        log.seek(log_start)
        refusals = gateway_refusal_durations(log.read().splitlines())
    setup = (
        f"{plan.bursts} bursts of {plan.size} completions ({plan.max_tokens} tokens, half streamed) against "
        f"GATEWAY_MAX_IN_FLIGHT={MAX_IN_FLIGHT}, GATEWAY_MAX_QUEUED={MAX_QUEUED}, model {model}"
    )
    return OverloadResult(figures(attempts, liveness, refusals), left_held(gateway_url, triton_metrics_url), setup)


def main() -> None:
    plan_args = {
        "bursts": int(os.environ.get("OVERLOAD_BURSTS", "5")),
        "size": int(os.environ.get("OVERLOAD_SIZE", "64")),
        "max_tokens": int(os.environ.get("OVERLOAD_MAX_TOKENS", "256")),
    }
    run_dir = REPO_ROOT / ".run" / time.strftime("overload-%Y%m%d-%H%M%S")
    print(f"overload: a fast stack in {run_dir} (its logs stay there)", flush=True)
    model = resolve_model(FAST_MODEL_NAME, CachePaths(default_cache_dir()))
    config = StackConfig.serving(
        model,
        run_dir=run_dir,
        gateway_env=GATEWAY_ENV,
        **{name: free_port() for name in ("http_port", "grpc_port", "metrics_port", "gateway_port")},
    )
    with LocalStack(config) as stack:
        assert stack.gateway is not None
        plan = BurstPlan(stack.gateway_url, config.model_name, **plan_args)
        result = overload(stack.gateway_url, stack.triton_metrics_url, config.model_name, stack.gateway.log_path, plan)
    left = stray_processes(run_dir)
    print(result.summary())
    if left:
        print(f"FAILED: processes left after stopping the stack: {left}")
    sys.exit(0 if result.passed and not left else 1)
