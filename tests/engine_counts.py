"""What vLLM's engine counted, read from Triton's metrics, for tests that check a request was cancelled.

The backend applies the engine's statistics from a thread (backend/vllm_backend/metrics.py), so they can lag a
request's last byte: an earlier request (a warm-up, a probe) may be counted after the test read its baseline.
`settled` waits for the counts to stop moving, and the checks compare what only the long request can move.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from localstack.processes import wait_until
from localstack.stack import LocalStack
from vllm_backend.cancels import ABORTED

# How long a paused engine's short run waits for its tokens to reach the client before the next run.
SETTLE_S = 0.5

# A request that generated more than this ran long: only the tests' long requests (2000 tokens) do.
LONG_RUN_TOKENS = 1000


def _families(url: str) -> list:
    return list(text_string_to_metric_families(httpx.get(url, timeout=10).text))


def _matches(sample_labels: dict[str, str], wanted: dict[str, str]) -> bool:
    """Label values compared as numbers: Triton writes a bucket's `le` as it likes (1000, 1000.0, 1e+03)."""
    return all(k in sample_labels and float(sample_labels[k]) == float(v) for k, v in wanted.items())


def _value(families: list, name: str, model: str, **labels: str) -> float:
    for family in families:
        for sample in family.samples:
            if sample.name == name and sample.labels.get("model") == model and _matches(sample.labels, labels):
                return sample.value
    return 0.0


@dataclass(frozen=True)
class EngineCounts:
    running: float
    waiting: float
    generated: float  # vllm:generation_tokens_total
    long_finished: float  # requests that finished with more than LONG_RUN_TOKENS tokens

    @classmethod
    def read(cls, metrics_url: str, model: str) -> EngineCounts:
        families = _families(metrics_url)
        finished = _value(families, "vllm:request_generation_tokens_count", model)
        short = _value(families, "vllm:request_generation_tokens_bucket", model, le=str(LONG_RUN_TOKENS))
        return cls(
            running=_value(families, "vllm:num_requests_running", model),
            waiting=_value(families, "vllm:num_requests_waiting", model),
            generated=_value(families, "vllm:generation_tokens_total", model),
            long_finished=finished - short,
        )


def settled(metrics_url: str, model: str, quiet_s: float = 0.5, timeout_s: float = 15.0) -> EngineCounts:
    """The counts once the engine is idle and they stayed still for `quiet_s`."""
    deadline = time.monotonic() + timeout_s
    last = EngineCounts.read(metrics_url, model)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = EngineCounts.read(metrics_url, model)
        if now == last and now.running == 0 and now.waiting == 0:
            return now
        last = now
    raise AssertionError(f"the engine's counts did not settle within {timeout_s} s: {last}")


def assert_generation_stopped(metrics_url: str, model: str, hold_s: float = 2.0) -> None:
    """Once the engine's counts have settled, its token count holds for `hold_s` more: nothing generates any
    longer. A request still generating keeps the counts from settling, or moves them during the hold. (A first
    reading of 0 running is not enough: it may predate the request, since the metrics lag it.)"""
    before = settled(metrics_url, model, quiet_s=0.7, timeout_s=10.0)
    time.sleep(hold_s)
    after = EngineCounts.read(metrics_url, model)
    assert after.generated == before.generated, f"the engine kept generating: {before} -> {after}"


def assert_cancelled(metrics_url: str, model: str, before: EngineCounts, long_tokens: int) -> None:
    """The long request (`long_tokens` tokens, ignore_eos) begun after `before` left the engine unfinished:
    aborted, since its Triton request was cancelled. A request that ran to its end would have generated all
    its tokens and been counted among the long finished ones."""
    assert wait_until(lambda: EngineCounts.read(metrics_url, model).running == 0, 10, 0.1), "still running"
    after = settled(metrics_url, model, quiet_s=1.0)
    ran_to_its_end = f"the request ran to its end: not cancelled ({before} -> {after})"
    assert after.long_finished == before.long_finished, ran_to_its_end
    generated = after.generated - before.generated
    assert generated < long_tokens, f"the engine generated {generated} tokens: all of the request's"


def aborts(*stacks: LocalStack) -> int:
    """How many cancelled requests the stacks' backends have aborted in their engines: the lines their Triton logs
    got for them (backend/vllm_backend/cancels.py)."""
    return sum(
        stack.triton.log_path.read_text(errors="replace").count(ABORTED) for stack in stacks if stack.triton is not None
    )


def suspend_engines(stack: LocalStack) -> list[psutil.Process]:
    """vLLM's engine stops stepping (SIGSTOP), as a stuck engine would. What is asked of it until it resumes,
    an abort included, waits in its queue."""
    engines = stack.engine_processes()
    assert engines, "no engine process found"
    for process in engines:
        process.suspend()
    return engines


def resume(engines: list[psutil.Process]) -> None:
    for process in engines:
        try:
            process.resume()
        except psutil.NoSuchProcess:  # killed meanwhile, with its Triton
            pass


class PausedEngine:
    """Stacks' vLLM engines, stopped (SIGSTOP) except for short runs: requests sent meanwhile get a few tokens
    per run, so a test can read a stream's first event while the request is still far from its end. (The fast
    engine makes 2000 tokens in about a second: stopped only after the client's first event, it could already
    have finished on a loaded machine.)"""

    def __init__(self, *stacks: LocalStack) -> None:
        self.stacks = stacks
        self.engines = [engine for stack in stacks for engine in suspend_engines(stack)]

    def run_for(self, seconds: float) -> None:
        """Resumes the engines for `seconds`, timed by a shell of its own at a real-time priority (where the
        kernel allows it) rather than by this process. On a loaded machine the engine can run for seconds past
        a step's end otherwise, and finish the requests that a test meant to hold mid-way: beside a one-core hog,
        a 20 ms step timed by `time.sleep` in the test lasted 2.7 s (the threads reading the streams held the
        GIL), and one timed by a shell at the normal priority up to 2.8 s (it got no CPU)."""
        pids = " ".join(str(process.pid) for process in self.engines)
        # A pid gone meanwhile (killed with its Triton) only makes `kill` complain, on the discarded stderr.
        script = f"chrt -f -p 10 $$; kill -CONT {pids}; sleep {seconds:.3f}; kill -STOP {pids}"
        subprocess.run(["sh", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

    def run_until(self, done: Callable[[], bool], timeout_s: float = 30.0, step_s: float = 0.02) -> None:
        """Runs the engines in steps of `step_s` until `done()`, waiting up to `SETTLE_S` after each step for
        what it made to reach the client: through the backend, Triton and the gateway, which need no engine. A
        step makes a few dozen tokens of each request (none, if the machine gives the engine no CPU in time), so
        the tests' requests of 1000 tokens and more outlast dozens of steps: every stream gets its first event
        long before any can end."""
        deadline = time.monotonic() + timeout_s
        while not wait_until(done, SETTLE_S, 0.02):
            assert time.monotonic() < deadline, "nothing came out of the engine"
            self.run_for(step_s)

    def hold_until_aborted(self, before: int, count: int = 1, timeout_s: float = 10.0) -> None:
        """Waits, the engines still stopped, until their backends have aborted `count` cancelled requests since
        `aborts()` was `before`: the aborts are then queued to the engines, which drop those requests as they
        resume instead of running them to their end. (The backend looks for cancelled requests twice a second;
        a fixed wait for it failed on a loaded machine.)"""
        done = wait_until(lambda: aborts(*self.stacks) >= before + count, timeout_s, 0.05)
        assert done, f"the backend aborted {aborts(*self.stacks) - before} of {count} cancelled request(s)"


@contextmanager
def engine_paused(*stacks: LocalStack) -> Iterator[PausedEngine]:
    """The stacks' engines stopped within the block, resumed at its end. (Keep it short: the backend's health
    check counts an engine silent for about 18 s as hung, backend/model.py.)"""
    paused = PausedEngine(*stacks)
    try:
        yield paused
    finally:
        resume(paused.engines)
