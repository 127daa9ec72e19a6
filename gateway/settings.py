"""The gateway's configuration: one object, read from GATEWAY_* environment variables."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.routing.upstreams import UpstreamEntries, parse_entries


class Settings(BaseSettings):
    """Every knob of the gateway. Each field is set by `GATEWAY_<FIELD>` (case-insensitive)."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_", extra="ignore")

    host: str = Field("0.0.0.0", description="the address the gateway listens on")
    port: int = Field(9000, ge=1, le=65535, description="the port the gateway listens on (`make up PORT=9100` sets it)")
    triton_grpc_url: str = Field("localhost:8001", description="host:port of Triton's gRPC endpoint (one replica)")
    triton_grpc_urls: str | None = Field(
        None,
        description="several Triton replicas, comma-separated: host:port entries and/or dns:///name:port (re-resolved "
        "every GATEWAY_DNS_REFRESH_S, one replica per address: a headless Service); replaces GATEWAY_TRITON_GRPC_URL",
    )
    routing: Literal["least_load", "prefix", "round_robin"] = Field(
        "least_load",
        description="how a replica is picked: least_load (the better of two random replicas by load), prefix "
        "(the replica that served the longest part of the prompt recently, weighed against load), round_robin",
    )
    required_models: str | None = Field(
        None,
        description="comma-separated models that must be servable for readiness; unset: every model any replica "
        "knows must be",
    )
    upstream_retries: int = Field(
        2, ge=0, description="retries on another replica when one fails with UNAVAILABLE before the first byte"
    )
    # `prefix` routing (gateway/routing/prefix_index.py, picker.py).
    prefix_block_chars: int = Field(
        256,
        ge=16,
        description="prefix routing: the prompt is cut into blocks of this many characters, each hashed with all "
        "before it; a replica's match is how many leading blocks it served recently",
    )
    prefix_weight: float = Field(
        1.0, ge=0, description="prefix routing: the weight of a replica's matched share of the prompt (0 to 1)"
    )
    prefix_load_weight: float = Field(
        1.0,
        ge=0,
        description="prefix routing: the weight of a replica's load, as a share of the mean load plus "
        "GATEWAY_PREFIX_LOAD_SLACK, against the matched share",
    )
    prefix_load_slack: float = Field(
        2.0,
        gt=0,
        description="prefix routing: requests added to the mean load when load is normalised, so that at low load "
        "one request more or a stale scrape does not move a prefix",
    )
    prefix_index_entries: int = Field(
        100_000,
        ge=1,
        description="prefix routing: the most (block, replica) pairs the gateway remembers, least recently used "
        "first out (each process its own index)",
    )
    prefix_index_mb: int = Field(
        32, ge=1, description="prefix routing: the index's memory bound in MiB (whichever bound is lower holds)"
    )
    load_refresh_s: float = Field(0.25, gt=0, description="how often each replica's engine gauges are scraped")
    dns_refresh_s: float = Field(5.0, gt=0, description="how often dns:/// replica entries are resolved again")
    triton_metrics_port: int = Field(
        8002,
        ge=1,
        le=65535,
        description="Triton's metrics port on each replica, when GATEWAY_TRITON_METRICS_URLS does not list one "
        "per replica",
    )
    request_timeout_s: float = Field(600.0, gt=0, description="upper bound for one generation request")
    first_token_timeout_s: float | None = Field(
        None,
        gt=0,
        description="deadline for a streamed request's first response from Triton (then 504, or an error event); "
        "off by default: the wait includes the engine's queue, which legitimately grows under load (bound it "
        "with admission control instead)",
    )
    stall_timeout_s: float | None = Field(
        60.0,
        gt=0,
        description="deadline for each next response of a streamed request; a healthy engine sends one every "
        "few hundred milliseconds even on CPU, so 60 s only catches an upstream that stopped",
    )
    triton_grpc_status_codes: bool = Field(
        False,
        description="ask Triton (24.08 and later) to end failed streams with a gRPC status code "
        "(the `triton_grpc_error` header) instead of an error message in the stream. Off by default: Triton "
        "2.51 aborts when such a stream is cancelled as it fails (a request with several prompts that all fail)",
    )
    breaker_failures: int = Field(
        5, ge=0, description="consecutive UNAVAILABLE errors of a model that open its circuit breaker (0: off)"
    )
    breaker_cooldown_s: float = Field(
        10.0, gt=0, description="how long an open breaker fails requests fast (503) before letting one probe through"
    )
    max_n: int | None = Field(128, ge=1, description="largest `n` a request may ask for (then 400)")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="largest max_tokens / max_completion_tokens (then 400); also the limit of requests that set "
        "none; unset: the model's context bounds it",
    )
    max_prompts: int | None = Field(128, ge=1, description="most prompts in one completions request (then 400)")
    health_timeout_s: float = Field(2.0, gt=0, description="timeout of one readiness check against Triton")
    model_refresh_s: float = Field(
        2.0,
        gt=0,
        description="how often the model map (Triton's ready models) is refreshed in the background; a request "
        "for a model missing from it refreshes it at once, one call shared by every request that waits",
    )
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0, description="larger request bodies get a 413")
    max_header_bytes: int = Field(
        64 * 1024,
        gt=0,
        description="a request line and headers larger than this get a 431 and the connection is closed (neither "
        "httptools nor uvicorn bounds them)",
    )
    triton_metrics_urls: list[str] = Field(
        default_factory=lambda: ["http://localhost:8002/metrics"],
        description="Triton metrics endpoints federated into /metrics (a JSON list)",
    )
    metrics_timeout_s: float = Field(1.0, gt=0, description="timeout of one fetch of Triton's metrics")
    ready_cache_s: float = Field(1.0, ge=0, description="how long a readiness answer is reused")
    model_aliases: dict[str, str] = Field(
        default_factory=dict, description="extra model names clients may use (a JSON object: alias -> Triton model)"
    )
    tool_call_parser: Literal["hermes", "llama3_json", "mistral"] = Field(
        "hermes", description="how tool calls are read from a model's output with tool_choice auto"
    )
    tool_call_parsers: dict[str, Literal["hermes", "llama3_json", "mistral"]] = Field(
        default_factory=dict, description="per-model tool-call parser (a JSON object: model -> parser)"
    )
    keep_alive_s: int = Field(
        75,
        ge=1,
        description="how long an idle client connection stays open; longer than clients' pools (httpx 5 s, aiohttp "
        "15 s) and load balancers (60 s) keep one, so the gateway does not close a connection as a client reuses it",
    )
    workers: int = Field(1, ge=1, description="gateway processes serving the port; metrics count all of them")
    prometheus_multiproc_dir: str | None = Field(
        None,
        validation_alias="PROMETHEUS_MULTIPROC_DIR",
        description="folder where workers share metric values (prometheus_client's own variable, no prefix); "
        "a temporary one is made when workers > 1 and it is unset",
    )
    grpc_experiments: str = Field(
        "-event_engine_client",
        validation_alias="GRPC_EXPERIMENTS",
        description="gRPC core's experiment switches for the Triton client (gRPC's own variable, no prefix); "
        "the default reads streams with gRPC's classic poller instead of its event engine: a quarter less CPU "
        "per streamed chunk",
    )
    api_keys: str | None = Field(
        None,
        description="comma-separated API keys (named env-1, env-2, ... in logs); once any key source is set, "
        "every route but /health/* and /metrics needs `Authorization: Bearer <key>`",
    )
    api_keys_file: str | None = Field(
        None,
        description="a JSON Lines file of keys with names, limits and allowed models (docs/operations.md, Keys and "
        "limits); re-read when it changes",
    )
    metrics_api_key: str | None = Field(None, description="when set, /metrics needs this key (and only this one)")
    redis_url: str | None = Field(
        None,
        description="redis://host:port/db: per-key counters shared by every worker and replica; in memory, per "
        "process, when unset",
    )
    max_in_flight: int | None = Field(
        None, ge=1, description="generations served at once by one gateway process; unlimited when unset"
    )
    max_queued: int = Field(
        100, ge=0, description="generations waiting for one of GATEWAY_MAX_IN_FLIGHT; past it, 503 with Retry-After"
    )
    queue_timeout_s: float = Field(
        30.0, gt=0, description="the longest a generation waits in that queue before a 503 with Retry-After"
    )
    shed_waiting_above: int | None = Field(
        None,
        ge=0,
        description="refuse new generations (503) while the model's engines have more requests waiting "
        "(vllm:num_requests_waiting, from GATEWAY_TRITON_METRICS_URLS); off when unset",
    )
    shed_refresh_s: float = Field(1.0, gt=0, description="how often that waiting count is scraped when shedding")
    # Graceful drain (gateway/drain/).
    drain_timeout_s: float = Field(
        30.0,
        ge=0,
        description="after SIGTERM, how long generations in flight may run before they are cut with an error "
        "event; the process exits a few seconds later (keep Kubernetes' grace period above preStop plus this)",
    )
    # The Responses API's store (gateway/responses/).
    data_dir: str = Field("data", description="the gateway's data folder: the default SQLite store of responses")
    database_url: str | None = Field(
        None,
        description="postgresql://user:password@host:port/db: the responses store on PostgreSQL (asyncpg) instead "
        "of SQLite in GATEWAY_DATA_DIR (any SQLAlchemy async URL works)",
    )
    responses_retention_s: float | None = Field(
        30 * 24 * 3600.0,
        gt=0,
        description="stored responses older than this are removed (a sweep runs in the background); unset: kept",
    )
    log_level: str = Field("info", description="the log level (debug, info, warning, error)")
    log_content: bool = Field(False, description="put prompts and outputs in the request logs")


    @field_validator("triton_grpc_urls")
    @classmethod
    def _replicas_parse(cls, value: str | None) -> str | None:
        if value is not None:
            parse_entries(value)  # a malformed entry stops the start with its name
        return value

    @property
    def upstream_entries(self) -> UpstreamEntries:
        if self.triton_grpc_urls:
            return parse_entries(self.triton_grpc_urls)
        return UpstreamEntries((self.triton_grpc_url,))

    @property
    def required_model_names(self) -> list[str]:
        return [name.strip() for name in (self.required_models or "").split(",") if name.strip()]


@lru_cache
def get_settings() -> Settings:
    return Settings()
