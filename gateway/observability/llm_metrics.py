"""The gateway's own LLM metrics, labelled by model."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 120)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5)


class LLMMetrics:
    """One set of metric objects per registry (tests and workers each get their own)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "gateway_requests",
            "Generation requests by endpoint and outcome (ok, client_error, server_error, disconnected).",
            ["model", "endpoint", "outcome"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "gateway_requests_in_flight",
            "Generation requests being served.",
            ["model", "endpoint"],
            registry=registry,
            multiprocess_mode="livesum",  # with several workers: the sum over the running ones
        )
        self.ttft = Histogram(
            "gateway_time_to_first_token_seconds",
            "From the request's arrival to its first generated text.",
            ["model", "endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.itl = Histogram(
            "gateway_inter_token_latency_seconds",
            "Time between consecutive streamed chunks of one request.",
            ["model", "endpoint"],
            buckets=_ITL_BUCKETS,
            registry=registry,
        )
        self.e2e = Histogram(
            "gateway_e2e_request_latency_seconds",
            "From the request's arrival to its last byte.",
            ["model", "endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "gateway_prompt_tokens", "Prompt tokens of completed requests.", ["model"], registry=registry
        )
        self.completion_tokens = Counter(
            "gateway_completion_tokens", "Generated tokens of completed requests.", ["model"], registry=registry
        )
        self.errors = Counter(
            "gateway_errors", "Errors returned to clients, by OpenAI error type.", ["model", "type"], registry=registry
        )
        self.disconnects = Counter(
            "gateway_client_disconnects",
            "Requests whose client went away before the answer was complete.",
            ["model", "endpoint"],
            registry=registry,
        )
