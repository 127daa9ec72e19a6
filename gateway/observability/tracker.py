"""Follows one generation request and reports it to the metrics and the request's log record."""

from __future__ import annotations

import time

from gateway.observability.llm_metrics import LLMMetrics
from gateway.observability.request_context import RequestRecord


class GenerationTracker:
    def __init__(self, metrics: LLMMetrics, record: RequestRecord | None, model: str, endpoint: str) -> None:
        self.metrics = metrics
        self.record = record
        self.labels = (model, endpoint)
        self.started = record.started if record is not None else time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None
        self.finished = False
        if record is not None:
            record.model, record.endpoint = model, endpoint
        # Label lookups take a lock and a dict search: done once here, not per token.
        self._ttft = metrics.ttft.labels(model, endpoint)
        self._itl = metrics.itl.labels(model, endpoint)
        metrics.in_flight.labels(*self.labels).inc()

    def upstream_id(self, request_id: str) -> None:
        if self.record is not None:
            self.record.triton_request_id = request_id

    def on_text(self) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
            self._ttft.observe(now - self.started)
            if self.record is not None:
                self.record.ttft_s = round(now - self.started, 6)
        elif self.last is not None:
            self._itl.observe(now - self.last)
        self.last = now

    def finish(
        self,
        outcome: str,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        error_type: str | None = None,
        output: str | None = None,
    ) -> None:
        if self.finished:
            return
        self.finished = True
        model, endpoint = self.labels
        m = self.metrics
        m.in_flight.labels(*self.labels).dec()
        m.requests.labels(model, endpoint, outcome).inc()
        m.e2e.labels(*self.labels).observe(time.perf_counter() - self.started)
        m.prompt_tokens.labels(model).inc(prompt_tokens)
        m.completion_tokens.labels(model).inc(completion_tokens)
        if error_type is not None:
            m.errors.labels(model, error_type).inc()
        if outcome == "disconnected":
            m.disconnects.labels(*self.labels).inc()
        if self.record is not None:
            self.record.prompt_tokens = prompt_tokens
            self.record.completion_tokens = completion_tokens
            self.record.client_disconnected = outcome == "disconnected"
            self.record.error_type = error_type
            self.record.output = output
