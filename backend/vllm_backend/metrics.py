"""vLLM's engine statistics as Triton metrics (`REPORT_CUSTOM_METRICS`).

The eight `vllm:` families of the stock backend, with the same names, labels and
buckets, plus the scheduler gauges it drops. vLLM hands statistics to a
StatLoggerBase; this one turns them into plain updates, and a thread applies them
to Triton's metric API so the engine's loop never waits on Triton.

Each call to that API is a round trip to the Triton process, and the engine reports after every step: a few
calls per token at one stream. So the thread gathers what arrives within `COALESCE_S` and applies it as one
batch (`merge_updates`): increments summed, only the last value of a gauge, and a gauge left alone when it did
not change. Histogram observations cannot be merged and are applied one by one; the one histogram observed per
token, `vllm:time_per_output_token_seconds`, can be left out (`REPORT_TIME_PER_OUTPUT_TOKEN`): at GPU token
rates its round trips cost the path 13 to 19% of its throughput (bench/README.md, part 3).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from vllm_backend.compat import ITL_FIELD, KV_USAGE_FIELD, StatLoggerBase, record_arguments

COUNTER, HISTOGRAM, GAUGE = "counter", "histogram", "gauge"
TIME_PER_OUTPUT_TOKEN = "vllm:time_per_output_token_seconds"  # the one family observed per token
COALESCE_S = 0.05  # how long the sink gathers updates before applying them: the metrics lag by at most this


def one_two_five(limit: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to `limit` (vLLM's token-count buckets)."""
    buckets, exponent = [], 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > limit:
                return buckets
            buckets.append(float(value))
        exponent += 1


@dataclass(frozen=True)
class FamilySpec:
    name: str
    kind: str
    description: str
    buckets: tuple[float, ...] | None = None


def family_specs(max_model_len: int, per_token: bool = True) -> list[FamilySpec]:
    """The families to register; `per_token` False leaves out TIME_PER_OUTPUT_TOKEN."""
    token_buckets = tuple(one_two_five(max_model_len))
    specs = [
        FamilySpec("vllm:prompt_tokens_total", COUNTER, "Number of prefill tokens processed."),
        FamilySpec("vllm:generation_tokens_total", COUNTER, "Number of generation tokens processed."),
        FamilySpec(
            "vllm:time_to_first_token_seconds", HISTOGRAM, "Histogram of time to first token in seconds.",
            (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0),
        ),
        FamilySpec(
            TIME_PER_OUTPUT_TOKEN, HISTOGRAM, "Histogram of time per output token in seconds.",
            (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5),
        ),
        FamilySpec(
            "vllm:e2e_request_latency_seconds", HISTOGRAM, "Histogram of end to end request latency in seconds.",
            (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
        ),
        FamilySpec(
            "vllm:request_prompt_tokens", HISTOGRAM, "Number of prefill tokens processed.", token_buckets
        ),
        FamilySpec(
            "vllm:request_generation_tokens", HISTOGRAM, "Number of generation tokens processed.", token_buckets
        ),
        FamilySpec("vllm:request_params_n", HISTOGRAM, "Histogram of the n request parameter.", (1, 2, 5, 10, 20)),
        # Beyond the stock backend: the scheduler's state.
        FamilySpec("vllm:num_requests_running", GAUGE, "Number of requests currently running on the engine."),
        FamilySpec("vllm:num_requests_waiting", GAUGE, "Number of requests waiting to be processed."),
        FamilySpec("vllm:kv_cache_usage_perc", GAUGE, "KV-cache usage. 1 means 100 percent usage."),
        # Beyond the stock backend: what prefix-aware routing buys (hits / queries, per replica).
        FamilySpec("vllm:prefix_cache_queries_total", COUNTER, "Prefix cache queries, in queried tokens."),
        FamilySpec("vllm:prefix_cache_hits_total", COUNTER, "Prefix cache hits, in cached tokens."),
    ]  # fmt: skip
    return [spec for spec in specs if per_token or spec.name != TIME_PER_OUTPUT_TOKEN]


# One update: (family name, operation, value). Operations: "inc", "observe", "set".
Update = tuple[str, str, float]


def updates_from_stats(scheduler_stats: Any, iteration_stats: Any, per_token: bool = True) -> list[Update]:
    """Plain updates from vLLM's statistics objects (read defensively: their fields are not a stable API);
    `per_token` False leaves out TIME_PER_OUTPUT_TOKEN's observations."""
    updates: list[Update] = []
    if iteration_stats is not None:
        prompt = getattr(iteration_stats, "num_prompt_tokens", 0)
        generation = getattr(iteration_stats, "num_generation_tokens", 0)
        if prompt:
            updates.append(("vllm:prompt_tokens_total", "inc", prompt))
        if generation:
            updates.append(("vllm:generation_tokens_total", "inc", generation))
        for value in getattr(iteration_stats, "time_to_first_tokens_iter", ()):
            updates.append(("vllm:time_to_first_token_seconds", "observe", value))
        for value in getattr(iteration_stats, ITL_FIELD, ()) if per_token else ():
            updates.append((TIME_PER_OUTPUT_TOKEN, "observe", value))
        for value in getattr(iteration_stats, "n_params_iter", ()):
            updates.append(("vllm:request_params_n", "observe", value))
        for finished in getattr(iteration_stats, "finished_requests", ()):
            updates.append(("vllm:e2e_request_latency_seconds", "observe", finished.e2e_latency))
            updates.append(("vllm:request_prompt_tokens", "observe", finished.num_prompt_tokens))
            updates.append(("vllm:request_generation_tokens", "observe", finished.num_generation_tokens))
    if scheduler_stats is not None:
        updates.append(("vllm:num_requests_running", "set", getattr(scheduler_stats, "num_running_reqs", 0)))
        updates.append(("vllm:num_requests_waiting", "set", getattr(scheduler_stats, "num_waiting_reqs", 0)))
        updates.append(("vllm:kv_cache_usage_perc", "set", getattr(scheduler_stats, KV_USAGE_FIELD, 0.0)))
        prefix = getattr(scheduler_stats, "prefix_cache_stats", None)
        if prefix is not None:
            if queries := getattr(prefix, "queries", 0):
                updates.append(("vllm:prefix_cache_queries_total", "inc", queries))
            if hits := getattr(prefix, "hits", 0):
                updates.append(("vllm:prefix_cache_hits_total", "inc", hits))
    return updates


def merge_updates(batches: Iterable[list[Update]]) -> list[Update]:
    """Many batches as one: each family's increments summed, its last gauge value, every observation in order."""
    increments: dict[str, float] = {}
    settings: dict[str, float] = {}
    observations: list[Update] = []
    for batch in batches:
        for name, operation, value in batch:
            if operation == "inc":
                increments[name] = increments.get(name, 0) + value
            elif operation == "set":
                settings[name] = value
            else:
                observations.append((name, operation, value))
    return [
        *((name, "inc", total) for name, total in increments.items()),
        *((name, "set", value) for name, value in settings.items()),
        *observations,
    ]


class MetricsSink:
    """Applies updates to Triton metrics from its own thread, gathered for `coalesce_s` at a time."""

    def __init__(
        self, make_metric: Callable[[FamilySpec], Any], specs: Iterable[FamilySpec], coalesce_s: float = COALESCE_S
    ) -> None:
        self.metrics = {spec.name: make_metric(spec) for spec in specs}
        self.coalesce_s = coalesce_s
        self._gauges: dict[str, float] = {}  # the value each gauge was last set to
        self._queue: queue.SimpleQueue[list[Update] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="vllm-metrics", daemon=True)
        self._thread.start()

    def submit(self, updates: list[Update]) -> None:
        if updates:
            self._queue.put(updates)

    def _run(self) -> None:
        while (first := self._queue.get()) is not None:
            batches, closing = self._gather(first)
            self._apply(merge_updates(batches))
            if closing:
                return

    def _gather(self, first: list[Update]) -> tuple[list[list[Update]], bool]:
        """`first` and what else arrives within `coalesce_s`; True when close() came meanwhile."""
        batches = [first]
        deadline = time.monotonic() + self.coalesce_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                batch = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if batch is None:
                return batches, True
            batches.append(batch)
        return batches, False

    def _apply(self, updates: list[Update]) -> None:
        for name, operation, value in updates:
            metric = self.metrics.get(name)
            if metric is None:
                continue
            if operation == "set":
                if self._gauges.get(name) == value:
                    continue
                self._gauges[name] = value
            getattr(metric, {"inc": "increment", "observe": "observe", "set": "set"}[operation])(value)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)


def stat_logger_factory(sink: MetricsSink) -> Callable[..., StatLoggerBase]:
    per_token = TIME_PER_OUTPUT_TOKEN in sink.metrics

    class TritonStatLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(self, *args: Any, **kwargs: Any) -> None:  # releases differ after the first two
            sink.submit(updates_from_stats(*record_arguments(args, kwargs), per_token=per_token))

        def log_engine_initialized(self) -> None:
            pass

    return TritonStatLogger
