"""What a local stack runs: its ports, model, memory share, core placement and replicas (nothing started here)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from localstack.device import Device, engine_device
from localstack.model_choice import FAST_MODEL_MEMORY_SHARE as LEAST_SHARE  # the worker process alone needs it
from localstack.model_choice import ServedModel, repository_models
from localstack.model_repo import ENGINE_MEMORY_SHARE
from localstack.paths import DEFAULT_MODEL_NAME, CachePaths, backend_venv_from_env, default_cache_dir
from localstack.placement import replica_engine_core

REPLICA_PORT_STEP = 100


@dataclass
class StackConfig:
    run_dir: Path
    cache: CachePaths = field(default_factory=lambda: CachePaths(default_cache_dir()))
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    gateway_port: int = 9000
    gateway_host: str = "127.0.0.1"
    model_name: str = DEFAULT_MODEL_NAME
    # The Hugging Face folder served as `model_name`; None: the prepared default model.
    model_dir: Path | None = None
    # A Triton model repository served as it is (every model in it); `model_dir` is then unused.
    model_repository: Path | None = None
    start_timeout_s: float = 600.0
    gateway_env: dict[str, str] = field(default_factory=dict)
    engine_memory_share: float = ENGINE_MEMORY_SHARE
    # Triton, its stubs and the gateway on the cores vLLM's CPU workers leave free (localstack.placement).
    keep_off_engine_cores: bool = True
    # Triton replicas, each with its own engine, behind the one gateway; replica i listens on the ports + 100 * i.
    replicas: int = 1
    # The core this stack's engine computes on (VLLM_CPU_OMP_THREADS_BIND); None: vLLM's choice, every core but
    # the last, which put the engines of all replicas on one core, where they took turns busy-waiting.
    engine_core: int | None = None
    # The venv the stub's Python (and so vLLM) comes from; None: the one running this code. It must be built
    # on the same interpreter, whose libpython the stub embeds.
    backend_venv: Path | None = field(default_factory=backend_venv_from_env)
    # What the engine runs on (localstack.device): its engine arguments follow, and a CUDA engine has no CPU
    # workers to keep the serving processes off.
    device: Device = field(default_factory=engine_device)

    def __post_init__(self) -> None:
        if self.device == "cuda":
            self.keep_off_engine_cores = False

    def first_of_replicas(self) -> "StackConfig":
        """This configuration as replica 0 of several: its engine's share of the memory one would reserve (but
        never less than any engine needs), its own core, and no placement. Unchanged for a single replica."""
        if self.replicas <= 1:
            return self
        share = max(self.engine_memory_share / self.replicas, min(self.engine_memory_share, LEAST_SHARE))
        return replace(self, engine_memory_share=share, keep_off_engine_cores=False, engine_core=replica_engine_core(0))

    def replica(self, index: int) -> "StackConfig":
        """The configuration of replica `index` (1 and up), from `first_of_replicas`'s: its own ports, run folder
        and core, and no core placement (placement tuned for one engine does not apply to two)."""
        offset = REPLICA_PORT_STEP * index
        return replace(
            self,
            run_dir=self.run_dir / f"replica-{index}",
            http_port=self.http_port + offset,
            grpc_port=self.grpc_port + offset,
            metrics_port=self.metrics_port + offset,
            replicas=1,
            keep_off_engine_cores=False,
            engine_core=replica_engine_core(index),
        )

    @classmethod
    def serving(cls, model: ServedModel, **settings: Any) -> "StackConfig":
        """A stack serving one Hugging Face folder under its name, with that model's memory share and placement."""
        settings.setdefault("keep_off_engine_cores", model.keep_off_engine_cores)
        return cls(model_name=model.name, model_dir=model.folder, engine_memory_share=model.memory_share, **settings)

    @classmethod
    def serving_repository(cls, repository: Path, **settings: Any) -> "StackConfig":
        """A stack serving a whole model repository; `model_name` is its first model, for messages and tests."""
        return cls(model_name=repository_models(repository)[0], model_repository=repository, **settings)
