"""The local stack: a real Triton server running our vLLM backend, and the gateway in front.

Used by `make up` and by the end-to-end tests, so both run exactly the same thing.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from gateway.settings import Settings
from localstack.model_choice import repository_models
from localstack.model_repo import write_model_repository
from localstack.net import free_port, http_ok
from localstack.paths import REPO_ROOT, TRITON_HOME_VAR
from localstack.placement import engine_layout, keep_off_compute_cores
from localstack.processes import RUN_MARKER, Service, SignalFlag, engine_session_nice, lower_session_priority
from localstack.processes import stray_processes, wait_until
from localstack.stack_config import StackConfig
from localstack.triton_server import backends_dir, triton_argv, triton_env


# How often the stack looks for engines started after it placed its processes (a model loaded or restarted).
PLACEMENT_CHECK_S = 1.0

# What a stopping gateway gets beyond its drain (GATEWAY_DRAIN_TIMEOUT_S): the cut, then uvicorn's own shutdown.
GATEWAY_STOP_MARGIN_S = 15.0
# How long a stopped stack's last processes may take to exit by themselves.
STRAGGLER_WAIT_S = 5.0


class StackError(RuntimeError):
    """The stack could not start; the message carries the failing service's last log lines."""


class LocalStack:
    def __init__(self, config: StackConfig) -> None:
        self.config = config.first_of_replicas()
        # Replicas 2..N: Triton only, each a stack of its own; the gateway (this stack's) spreads over all.
        self.replicas = [LocalStack(self.config.replica(i)) for i in range(1, self.config.replicas)]
        self.triton: Service | None = None
        self.gateway: Service | None = None
        self.serving_cores: set[int] = set()
        self._stopping = threading.Event()
        self._interrupted = SignalFlag()
        self._placer: threading.Thread | None = None

    @property
    def gateway_url(self) -> str:
        return f"http://{self.config.gateway_host}:{self.config.gateway_port}"

    @property
    def triton_http_url(self) -> str:
        return f"http://127.0.0.1:{self.config.http_port}"

    @property
    def triton_metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.config.metrics_port}/metrics"

    def _triton_env(self) -> dict[str, str]:
        return triton_env(self.config.run_dir, self.config.backend_venv, self.config.engine_core)

    def served_models(self) -> list[str]:
        """Every model Triton loads; the stack is ready when all of them are."""
        if self.config.model_repository is not None:
            return repository_models(self.config.model_repository)
        return [self.config.model_name]

    def _repository(self) -> Path:
        """The given repository, or one written for this run around the model folder."""
        cfg = self.config
        if cfg.model_repository is not None:
            return cfg.model_repository
        model_dir = cfg.model_dir or cfg.cache.default_model_dir
        if not model_dir.is_dir():
            raise StackError(f"no model in {model_dir}: run scripts/install.sh to prepare the local stack")
        target = cfg.run_dir / "model_repository"
        return write_model_repository(target, model_dir, cfg.model_name, cfg.engine_memory_share, cfg.device)

    def start_triton(self) -> None:
        cfg = self.config
        if not cfg.cache.triton_bin.is_file():
            raise StackError(
                f"no Triton server at {cfg.cache.triton_bin}: run scripts/install.sh (or set {TRITON_HOME_VAR})"
            )
        shm_prefix = f"tvg{cfg.grpc_port}_"
        self.triton = self._triton_service("triton", self._repository(), self.served_models(), shm_prefix)

    def _triton_service(self, name: str, repository: Path, models: list[str], shm_prefix: str) -> Service:
        """Triton on this stack's ports, loading `models` from `repository`."""
        cfg = self.config
        backends = backends_dir(cfg.run_dir, cfg.cache.triton_python_backend)
        ports = (cfg.http_port, cfg.grpc_port, cfg.metrics_port)
        argv = triton_argv(cfg.cache.triton_bin, repository, backends, ports, models, shm_prefix)
        return Service(name, argv, self._triton_env(), cfg.run_dir / "triton.log")

    def triton_ready(self) -> bool:
        """Whether Triton answers that every model it serves is ready."""
        return all(http_ok(f"{self.triton_http_url}/v2/models/{name}/ready") for name in self.served_models())

    def wait_triton_ready(self) -> None:
        ready = wait_until(self.triton_ready, self.config.start_timeout_s, 0.2, self.triton, self._interrupted)
        if self._interrupted.is_set():
            raise StackError("interrupted while Triton was starting")
        if not ready:
            raise StackError(f"Triton did not become ready:\n{self.triton.log_tail() if self.triton else ''}")
        # Only once loaded: Triton 2.51 waits forever for a stub that misses a health check during a load.
        lower_session_priority(self.triton.pid, engine_session_nice())

    def gateway_service(self, name: str, port: int, extra_env: dict[str, str] | None = None) -> Service:
        """A gateway process in front of this stack's Triton (started; the caller stops it)."""
        cfg = self.config
        env = dict(os.environ)
        env.update(
            {
                "GATEWAY_HOST": cfg.gateway_host,
                "GATEWAY_PORT": str(port),
                **self._upstream_env(),
                RUN_MARKER: str(cfg.run_dir),  # its workers too are found by `stray_processes`
                "GATEWAY_DATA_DIR": str(cfg.run_dir / f"{name}-data"),  # its stored responses, not the repo's
                **cfg.gateway_env,
                **(extra_env or {}),
            }
        )
        return Service(name, [sys.executable, "-m", "gateway"], env, cfg.run_dir / f"{name}.log", cwd=REPO_ROOT)

    def _upstream_env(self) -> dict[str, str]:
        if not self.replicas:
            return {
                "GATEWAY_TRITON_GRPC_URL": f"127.0.0.1:{self.config.grpc_port}",
                "GATEWAY_TRITON_METRICS_URLS": json.dumps([self.triton_metrics_url]),
            }
        stacks = [self, *self.replicas]
        return {
            "GATEWAY_TRITON_GRPC_URLS": ",".join(f"127.0.0.1:{s.config.grpc_port}" for s in stacks),
            "GATEWAY_TRITON_METRICS_URLS": json.dumps([s.triton_metrics_url for s in stacks]),
            "GATEWAY_REQUIRED_MODELS": ",".join(self.served_models()),
        }

    @contextmanager
    def extra_gateway(self, name: str, env: dict[str, str] | None = None) -> Iterator[tuple[Service, str]]:
        """Another gateway in front of this stack (its settings in `env`), ready, stopped on exit: (service, URL)."""
        port = free_port()
        service = self.gateway_service(name, port, env)
        url = f"http://{self.config.gateway_host}:{port}"
        try:
            ready = wait_until(lambda: http_ok(f"{url}/health/ready"), 90, 0.3, service)
            if not ready:
                raise StackError(f"the gateway {name} did not become ready:\n{service.log_tail()}\n{self.health()}")
            yield service, url
        finally:
            service.stop()

    def start_gateway(self) -> None:
        self.gateway = self.gateway_service("gateway", self.config.gateway_port)

    def wait_gateway_ready(self, timeout_s: float = 60.0) -> None:
        ready = wait_until(
            lambda: http_ok(f"{self.gateway_url}/health/ready"), timeout_s, 0.2, self.gateway, self._interrupted
        )
        if self._interrupted.is_set():
            raise StackError("interrupted while the gateway was starting")
        if not ready:
            raise StackError(f"the gateway did not become ready:\n{self.gateway.log_tail() if self.gateway else ''}")

    def engine_processes(self) -> list:
        """vLLM's engine-core processes under this stack's Triton (and its replicas')."""
        found = [process for replica in self.replicas for process in replica.engine_processes()]
        if self.triton is None:
            return found
        for process in self.triton.descendants():
            try:
                if "EngineCore" in " ".join(process.cmdline()) or "EngineCore" in process.name():
                    found.append(process)
            except Exception:  # gone meanwhile
                continue
        return found

    def health(self) -> str:
        """One line on whether this stack's Triton still runs, with its log's end when it does not."""
        if self.triton is None:
            return "Triton: not started"
        if self.triton.running():
            return f"Triton: running (pid {self.triton.pid})"
        return f"Triton: exited ({self.triton.returncode()}); its log ends:\n{self.triton.log_tail()}"

    def kill_triton(self) -> None:
        """Simulates a crash of the server (its stubs and engines are cleared too)."""
        if self.triton is not None:
            self.triton.kill()

    def restart_triton(self) -> None:
        self.start_triton()
        self.wait_triton_ready()
        self.place_processes()

    def _services(self) -> list[psutil.Process]:
        return [psutil.Process(s.pid) for s in (self.triton, self.gateway) if s is not None and s.running()]

    def place_processes(self) -> None:
        """Once the engine is up, everything else moves to the cores its compute threads leave free."""
        if not self.config.keep_off_engine_cores:
            return
        try:
            cores = keep_off_compute_cores(self._services())
        except psutil.NoSuchProcess:  # a service ended meanwhile
            return
        if cores:  # none while an engine is still starting: what was placed stays
            self.serving_cores = cores

    def _keep_placed(self) -> None:
        """Places again whenever vLLM's processes change, until the stack stops."""
        placed = frozenset()
        while not self._stopping.wait(PLACEMENT_CHECK_S):
            try:
                layout = engine_layout(self._services())
            except psutil.NoSuchProcess:
                continue
            if layout != placed:
                self.place_processes()
                placed = layout

    def start(self) -> "LocalStack":
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.start_triton()
            for replica in self.replicas:
                replica.config.run_dir.mkdir(parents=True, exist_ok=True)
                replica.start_triton()
            self.start_gateway()
            self.wait_triton_ready()
            for replica in self.replicas:
                replica.wait_triton_ready()
            self.wait_gateway_ready()
            self.place_processes()
            if self.config.keep_off_engine_cores:
                self._placer = threading.Thread(target=self._keep_placed, name="placement", daemon=True)
                self._placer.start()
        except BaseException:
            self.stop()
            raise
        return self

    def interrupt(self) -> None:
        """Makes a `start` under way give up (it then stops what it started). Safe from a signal handler."""
        self._interrupted.set()
        for replica in self.replicas:
            replica.interrupt()

    def gateway_stop_grace_s(self) -> float:
        """How long a stopping gateway may take: its drain, then its shutdown."""
        env = {**os.environ, **self.config.gateway_env}
        drain_s = env.get("GATEWAY_DRAIN_TIMEOUT_S") or Settings.model_fields["drain_timeout_s"].default
        return float(drain_s) + GATEWAY_STOP_MARGIN_S

    def stop(self) -> None:
        """Stops everything, and returns once it has all exited: the gateway first (it drains its streams),
        then Triton, its stubs and vLLM's engines."""
        self._stopping.set()
        if self._placer is not None:
            self._placer.join()
        if self.gateway is not None:
            self.gateway.stop(grace_s=self.gateway_stop_grace_s())
        if self.triton is not None:
            self.triton.stop()
        for replica in self.replicas:
            replica.stop()
        # The backend's reaper is the last one out: it leaves once the stub and the engine it watches are gone.
        wait_until(lambda: not stray_processes(self.config.run_dir), STRAGGLER_WAIT_S, 0.1)

    def __enter__(self) -> "LocalStack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
