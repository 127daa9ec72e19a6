"""`make up REPLICAS=n` restarts a replica whose Triton died, and gives up on one that keeps failing
(localstack/supervision.py; the e2e test tests/e2e/test_up_replicas.py does it with real processes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from localstack.supervision import RESTART_LIMIT, RESTART_WINDOW_S, ReplicaSupervisor, ReplicaWatch, decide


def test_a_running_replica_is_left_alone_and_a_dead_one_restarted() -> None:
    assert decide(ReplicaWatch(), running=True, ready=False, now=0.0, start_timeout_s=60) == "ok"
    assert decide(ReplicaWatch(), running=False, ready=False, now=0.0, start_timeout_s=60) == "restart"


def test_a_restarting_replica_is_waited_for_until_ready_or_its_start_timeout() -> None:
    watch = ReplicaWatch(starting_since=100.0, restarts=[100.0])
    assert decide(watch, running=True, ready=False, now=130.0, start_timeout_s=60) == "wait"
    assert decide(watch, running=True, ready=True, now=130.0, start_timeout_s=60) == "back"
    assert decide(watch, running=True, ready=False, now=161.0, start_timeout_s=60) == "restart"  # hung start
    assert decide(watch, running=False, ready=False, now=110.0, start_timeout_s=60) == "restart"  # died starting


def test_a_replica_that_keeps_failing_is_given_up_on_and_old_restarts_are_forgiven() -> None:
    watch = ReplicaWatch(restarts=[10.0 * i for i in range(RESTART_LIMIT)])
    assert decide(watch, running=False, ready=False, now=40.0, start_timeout_s=60) == "give_up"
    later = 10.0 * (RESTART_LIMIT - 1) + RESTART_WINDOW_S - 1  # the first restart has left the window
    assert decide(watch, running=False, ready=False, now=later + 2, start_timeout_s=60) == "restart"


@dataclass
class FakeTriton:
    code: int | None = None  # None: running

    def running(self) -> bool:
        return self.code is None

    def returncode(self) -> int | None:
        return self.code

    pid: int = 0


@dataclass
class FakeConfig:
    grpc_port: int
    run_dir: Path
    start_timeout_s: float = 600.0


@dataclass
class FakeReplica:
    """What the supervisor touches of a `LocalStack`: its Triton, its config, and the three calls."""

    config: FakeConfig
    triton: FakeTriton = field(default_factory=FakeTriton)
    ready: bool = True
    replicas: list["FakeReplica"] = field(default_factory=list)
    starts: int = 0
    kills: int = 0

    def triton_ready(self) -> bool:
        return self.ready

    def kill_triton(self) -> None:
        self.kills += 1

    def start_triton(self) -> None:
        self.starts += 1
        self.triton = FakeTriton()
        self.ready = False


def test_the_supervisor_restarts_in_place_logs_it_and_reports_a_replica_that_keeps_failing(tmp_path: Path) -> None:
    second = FakeReplica(FakeConfig(8101, tmp_path / "replica-1"))
    first = FakeReplica(FakeConfig(8001, tmp_path), replicas=[second])
    lines: list[str] = []
    now = [0.0]
    supervisor = ReplicaSupervisor(first, lines.append, clock=lambda: now[0])  # type: ignore[arg-type]
    assert supervisor.check() is None and not lines

    second.triton = FakeTriton(code=-9)  # kill -9
    assert supervisor.check() is None
    assert (second.kills, second.starts, first.starts) == (1, 1, 0)
    assert "replica 1 (Triton gRPC port 8101): Triton was killed by signal 9; restarting it in place" in lines[-1]

    now[0] = 30.0
    assert supervisor.check() is None and len(lines) == 1  # still starting: nothing new
    second.ready = True
    now[0] = 42.0
    assert supervisor.check() is None
    assert lines[-1] == "[up] replica 1 (Triton gRPC port 8101) is ready again after 42 s"

    for attempt in range(RESTART_LIMIT - 1):
        second.triton = FakeTriton(code=1)
        now[0] += 1
        assert supervisor.check() is None
    second.triton = FakeTriton(code=1)
    failure = supervisor.check()
    assert failure is not None and "keeps failing" in failure and "exited with status 1" in failure
    assert second.starts == RESTART_LIMIT
