"""Part 4, routing over replicas: two Triton replicas of a model (the fast one unless told) with prefix
caching on, and one gateway at a time in front of them, started afresh for each run while the replicas keep
running: the load through one replica alone (`single`, the hit-rate baseline), then each policy (`round_robin`,
`least_load`, `prefix`), then `prefix` again while one replica restarts (`prefix_restart`,
bench/replica_restart.py). The load is one of two scenarios (bench/prefix_load.py): `single` requests, or
`multiturn` conversations whose every turn sends the whole history so far.

Each run sends its own system prompts (seeded by the run's name), so no run finds another's prompts cached, and
reads counter deltas, never absolute values. The engines' KV cache is capped (`kv_blocks`, vLLM's
`num_gpu_blocks_override`) so that every prompt on every replica does not fit: with the engine's own cache,
a million tokens on the fast model, every policy would cache every prompt everywhere and routing would decide
nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import conversations
from bench.jobs import run_json
from bench.replica_restart import ReplicaRestart
from bench.prefix_load import TOKENS_PER_WORD, reply_words
from bench.routing_report import PREFIX, RESTART, RUNS, SINGLE, kv_blocks
from localstack.model_choice import ServedModel, resolve_model
from localstack.model_repo import write_model_repository
from localstack.net import free_port, http_ok
from localstack.paths import FAST_MODEL_NAME, CachePaths, default_cache_dir
from localstack.processes import Service, wait_until
from localstack.stack import LocalStack
from localstack.stack_config import StackConfig

REPLICAS = 2
RESTART_AFTER_S = 5.0  # into the restart run, the last replica's Triton gets SIGTERM
RESTART_TAIL_S = 15.0  # the load goes on this long after it is back: it must get traffic again
BLOCK_TOKENS = 128  # vLLM's CPU block size unless told otherwise (vllm/platforms/cpu.py)
# The backend's engine health check answers within max(5 s, 3 x its interval) or counts as unanswered, and three
# unanswered in a row unload the model. On SmolLM2, one engine step that prefills several conversations of 1,300
# tokens on a core shared with other work took longer than 5 s three times running, and replica 1 lost its model
# mid-run (twice, 2026-12-07): every 10 s, an engine is declared hung after about two minutes of silence instead.
HEALTH_CHECK_INTERVAL_S = 10.0
USER_WORDS = {"single": 8, "multiturn": 24}  # a question; a message of a conversation
TEMPLATE_TOKENS = 8  # what the chat template adds around each message, about


@dataclass
class RoutingConfig:
    out_dir: Path
    clients: int = 64
    requests: int = 512  # per run
    prefixes: int = 4
    system_tokens: int = 1024
    max_tokens: int = 16
    user_words: int | None = None  # None: USER_WORDS of the scenario
    scenario: str = "single"
    min_turns: int = conversations.MIN_TURNS
    max_turns: int = conversations.MAX_TURNS
    zipf: float = conversations.ZIPF_EXPONENT
    kv_blocks: int | None = None  # per engine; None: `routing_report.kv_blocks`; 0: the engine's own size
    # Each engine's share of the machine's memory; None: the model's own (SmolLM2's 0.4 is 9 GiB a replica on
    # a 24 GiB machine, which a capped cache does not use, and vLLM refuses to start when that much is not free).
    memory_share: float | None = None
    warmup_requests: int = 32
    policies: tuple[str, ...] = RUNS
    model: str = FAST_MODEL_NAME  # a prepared model's name or a Hugging Face folder, as `make up MODEL=`

    @property
    def words_per_user_message(self) -> int:
        return self.user_words if self.user_words is not None else USER_WORDS[self.scenario]

    def history_tokens(self) -> int:
        """About the longest conversation's tokens after its system prompt (multiturn; 0 for single requests)."""
        if self.scenario != "multiturn":
            return 0
        words = self.words_per_user_message + reply_words(self.max_tokens)
        return self.max_turns * (round(words * TOKENS_PER_WORD) + 2 * TEMPLATE_TOKENS)

    def engine_blocks(self) -> int | None:
        if self.kv_blocks is None:
            own = max(1, -(-self.history_tokens() // BLOCK_TOKENS))  # a running conversation's blocks of its own
            return kv_blocks(self.prefixes, self.system_tokens, self.clients, REPLICAS, BLOCK_TOKENS, client_blocks=own)
        return self.kv_blocks or None

    def workload(self) -> dict[str, Any]:
        found = {
            "scenario": self.scenario, "model": self.model, "clients": self.clients, "requests per run": self.requests,
            "system prompts": self.prefixes, "system prompt tokens": self.system_tokens, "max_tokens": self.max_tokens,
            "user words": self.words_per_user_message,
            "KV blocks per engine": self.engine_blocks() or "engine's own", "block tokens": BLOCK_TOKENS,
        }  # fmt: skip
        if self.scenario == "multiturn":
            found.update({"turns": f"{self.min_turns} to {self.max_turns}", "Zipf exponent": self.zipf})
        return found


def _grpc(replica: LocalStack) -> str:
    """A replica as the gateway names it."""
    return f"127.0.0.1:{replica.config.grpc_port}"


def _repository(cfg: RoutingConfig, model: ServedModel) -> Path:
    """The local stack's repository for the model, with prefix caching on, the cache capped, and the engine's
    health checked every `HEALTH_CHECK_INTERVAL_S`."""
    share = cfg.memory_share or model.memory_share
    target = write_model_repository(cfg.out_dir / "model_repository", model.folder, model.name, share)
    interval = f'value: {{ string_value: "{HEALTH_CHECK_INTERVAL_S:g}" }}'
    with open(target / model.name / "config.pbtxt", "a") as config:
        config.write(f'parameters {{ key: "VLLM_HEALTH_CHECK_INTERVAL_S" {interval} }}\n')
    path = target / model.name / "1" / "model.json"
    args = json.loads(path.read_text())
    args["enable_prefix_caching"] = True
    blocks = cfg.engine_blocks()
    if blocks:
        args["num_gpu_blocks_override"] = blocks
    path.write_text(json.dumps(args, indent=2) + "\n")
    return target


class Routing:
    def __init__(self, config: RoutingConfig, log: Callable[[str], None] = print) -> None:
        self.config = config
        self.log = log
        self.runs: list[dict[str, Any]] = []
        self.model = resolve_model(config.model, CachePaths(default_cache_dir()))

    def _stack(self) -> LocalStack:
        cfg = self.config
        config = StackConfig.serving_repository(
            _repository(cfg, self.model), run_dir=cfg.out_dir / "stack", http_port=free_port(),
            grpc_port=free_port(), metrics_port=free_port(), gateway_port=free_port(), replicas=REPLICAS,
            keep_off_engine_cores=False,
        )  # fmt: skip
        return LocalStack(config)

    def _start_replicas(self, stack: LocalStack) -> list[LocalStack]:
        """Triton only, every replica; the gateways come and go per run."""
        replicas = [stack, *stack.replicas]
        for replica in replicas:
            replica.config.run_dir.mkdir(parents=True, exist_ok=True)
            replica.start_triton()
        for replica in replicas:
            replica.wait_triton_ready()
        return replicas

    def _gateway(self, stack: LocalStack, replicas: list[LocalStack], name: str, policy: str) -> tuple[Service, str]:
        port = free_port()
        env = {
            "GATEWAY_TRITON_GRPC_URLS": ",".join(_grpc(r) for r in replicas),
            "GATEWAY_TRITON_METRICS_URLS": json.dumps([r.triton_metrics_url for r in replicas]),
            "GATEWAY_REQUIRED_MODELS": self.model.name,
            "GATEWAY_ROUTING": policy,
            "GATEWAY_READY_CACHE_S": "0",
        }
        service = stack.gateway_service(f"gateway-{name}", port, env)
        url = f"http://{stack.config.gateway_host}:{port}"
        if not wait_until(lambda: http_ok(f"{url}/health/ready"), 90, 0.5, service):
            service.stop()
            raise RuntimeError(f"the {name} gateway did not become ready:\n{service.log_tail()}")
        return service, url

    def _load(self, url: str, replicas: list[LocalStack], name: str, until: list[str]) -> dict[str, Any]:
        """One run of the load; `until`: `--requests N`, or `--until-file PATH`."""
        cfg = self.config
        args = [
            "--url", url, "--model", self.model.name, "--tokenizer", str(self.model.folder),
            "--metrics-urls", json.dumps([r.triton_metrics_url for r in replicas]),
            "--replicas", json.dumps([_grpc(r) for r in replicas]),
            "--tag", name, "--prefixes", str(cfg.prefixes), "--system-tokens", str(cfg.system_tokens),
            "--user-words", str(cfg.words_per_user_message), "--max-tokens", str(cfg.max_tokens),
            "--clients", str(cfg.clients), "--scenario", cfg.scenario, "--min-turns", str(cfg.min_turns),
            "--max-turns", str(cfg.max_turns), "--zipf", str(cfg.zipf), *until,
        ]  # fmt: skip
        return run_json("bench.prefix_load", args, cfg.out_dir / f"{name}.json", 3600)

    def _one(self, stack: LocalStack, replicas: list[LocalStack], name: str, policy: str, requests: int) -> dict:
        service, url = self._gateway(stack, replicas, name, policy)
        try:
            return self._load(url, replicas, name, ["--requests", str(requests)])
        finally:
            service.stop(grace_s=stack.gateway_stop_grace_s())

    def _through_restart(self, stack: LocalStack, replicas: list[LocalStack], name: str) -> dict:
        """`prefix` while the last replica restarts (bench/replica_restart.py); the load runs until it is back."""
        stop_file = self.config.out_dir / f"{name}.stop"
        stop_file.unlink(missing_ok=True)
        service, url = self._gateway(stack, replicas, name, PREFIX)
        restart = ReplicaRestart(replicas[-1], _grpc(replicas[-1]), url, stop_file, RESTART_AFTER_S, RESTART_TAIL_S)
        restart.start()
        try:
            result = self._load(url, replicas, name, ["--until-file", str(stop_file)])
        finally:
            restart.join()  # even after a failed load: the restarted Triton is then the stack's to stop
            service.stop(grace_s=stack.gateway_stop_grace_s())
        if restart.error is not None:
            raise RuntimeError(f"the replica's restart failed: {restart.error!r}") from restart.error
        result["restart"] = restart.figures
        self.log(f"  restart: {restart.figures}")
        return result

    def _record(self, name: str, result: dict[str, Any]) -> None:
        result["policy"] = name
        self.runs.append(result)
        rates = ", ".join(f"{r['hits'] / r['queries']:.2f}" if r["queries"] else "-" for r in result["replicas"])
        waits = ", ".join(f"{r['waiting_mean']:.2f}" for r in result["replicas"])
        self.log(
            f"  {name:<12} {result['output_throughput']:8.1f} tok/s  TTFT p50 {result['p50_ttft_ms'] or 0:8.1f} "
            f"p90 {result['p90_ttft_ms'] or 0:8.1f} ms  hit rate {rates}  mean waiting {waits}  "
            f"failed {result['failed']}"
        )

    def run(self) -> list[dict[str, Any]]:
        cfg = self.config
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        self.log(f"part 4: {cfg.workload()}")
        stack = self._stack()
        try:
            self.log(f"starting {REPLICAS} Triton replicas of {self.model.name} in {stack.config.run_dir}")
            replicas = self._start_replicas(stack)
            self.log(f"  warm-up: {cfg.warmup_requests} requests over both replicas, prompts of their own")
            self._one(stack, replicas, "warmup", "round_robin", cfg.warmup_requests)
            for name in cfg.policies:
                if name == RESTART:
                    self._record(name, self._through_restart(stack, replicas, name))
                    continue
                over = replicas[:1] if name == SINGLE else replicas
                policy = "round_robin" if name == SINGLE else name  # one replica: every policy picks it
                self._record(name, self._one(stack, over, name, policy, cfg.requests))
        finally:
            stack.stop()
        self.log("everything part 4 started is stopped")
        return self.runs
