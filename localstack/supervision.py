"""`make up` with several replicas outlives a replica's death: the dead replica's Triton is started again in place
(as Kubernetes restarts a pod) while the gateway serves from the others. A replica that keeps failing (more than
`RESTART_LIMIT` restarts within `RESTART_WINDOW_S`) ends `make up`, as the gateway's exit does.

`decide` is the rule, pure; `ReplicaSupervisor` applies it to a running stack, once a second from `make up`'s loop,
in that loop's thread (no thread of its own, so a stop never races a restart: `LocalStack.stop` stops whatever
Triton a replica has then).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from localstack.processes import engine_session_nice, lower_session_priority
from localstack.stack import LocalStack, StackError

RESTART_LIMIT = 3
RESTART_WINDOW_S = 600.0
# A restart finds the compile cache its first start filled, and is ready within a minute here (the fast model in
# about 30 s). One that is not ready after this long has hung, as Triton 2.51 does when its Python stub misses a
# health check during the load (it then waits for it forever), and is started again.
RESTART_READY_S = 180.0

Action = Literal["ok", "wait", "restart", "back", "give_up"]


@dataclass
class ReplicaWatch:
    """What the supervisor remembers of one replica: since when it is starting again, and when it was restarted."""

    starting_since: float | None = None  # None: up (or not looked at yet)
    restarts: list[float] = field(default_factory=list)

    def recent_restarts(self, now: float, window_s: float = RESTART_WINDOW_S) -> int:
        return sum(1 for t in self.restarts if now - t < window_s)


def decide(
    watch: ReplicaWatch,
    running: bool,
    ready: bool,
    now: float,
    start_timeout_s: float,
    limit: int = RESTART_LIMIT,
    window_s: float = RESTART_WINDOW_S,
) -> Action:
    """What to do with one replica. `running`: its Triton process lives; `ready`: its models answer ready (only
    read while it starts again). A Triton that exits, exits while starting, or does not get ready within
    `start_timeout_s` is restarted, unless it already was `limit` times within `window_s`."""
    if watch.starting_since is None:
        if running:
            return "ok"
    elif running:
        if ready:
            return "back"
        if now - watch.starting_since < start_timeout_s:
            return "wait"
    return "restart" if watch.recent_restarts(now, window_s) < limit else "give_up"


def exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "is still running but not ready"
    if returncode < 0:
        return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


class ReplicaSupervisor:
    """Watches every Triton replica of a stack with two or more; `check` restarts those that died."""

    def __init__(self, stack: LocalStack, log: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.replicas = [stack, *stack.replicas]
        self.watches = [ReplicaWatch() for _ in self.replicas]
        self.log = log
        self.clock = clock

    @staticmethod
    def name(index: int, replica: LocalStack) -> str:
        return f"replica {index} (Triton gRPC port {replica.config.grpc_port})"

    def check(self) -> str | None:
        """One look at every replica; returns why `make up` must end, or None while it serves."""
        for index, (replica, watch) in enumerate(zip(self.replicas, self.watches)):
            triton = replica.triton
            running = triton is not None and triton.running()
            ready = watch.starting_since is not None and running and replica.triton_ready()
            now = self.clock()
            action = decide(watch, running, ready, now, min(replica.config.start_timeout_s, RESTART_READY_S))
            name = self.name(index, replica)
            if action == "back":
                lower_session_priority(triton.pid, engine_session_nice())  # as a first start does, once loaded
                self.log(f"[up] {name} is ready again after {now - watch.starting_since:.0f} s")
                watch.starting_since = None
            elif action == "give_up":
                log_path = replica.config.run_dir / "triton.log"
                code = triton.returncode() if triton is not None else None
                return (
                    f"{name} keeps failing: its Triton {exit_description(code)} after "
                    f"{watch.recent_restarts(now)} restarts within {RESTART_WINDOW_S / 60:.0f} min; see {log_path}"
                )
            elif action == "restart":
                try:
                    self._restart(index, replica, watch, now)
                except StackError as exc:  # it cannot even be started (its model or Triton gone from the disk)
                    return f"{name} cannot be restarted: {exc}"
        return None

    def _restart(self, index: int, replica: LocalStack, watch: ReplicaWatch, now: float) -> None:
        triton = replica.triton
        how = exit_description(triton.returncode() if triton is not None else None)
        watch.restarts.append(now)
        self.log(
            f"[up] {self.name(index, replica)}: Triton {how}; restarting it in place (restart "
            f"{watch.recent_restarts(now)} of at most {RESTART_LIMIT} within {RESTART_WINDOW_S / 60:.0f} min); the "
            f"gateway serves from the other replicas meanwhile. Log: {replica.config.run_dir / 'triton.log'}"
        )
        replica.kill_triton()  # what the dead one left: its stubs and engines, or a start that hung
        replica.start_triton()
        watch.starting_since = now
