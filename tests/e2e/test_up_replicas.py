"""`make up REPLICAS=2` outlives a replica's death, as a new user tried it (issue 37, item 0): `kill -9` of one
`tritonserver`. Requests keep succeeding from the other replica, `make up` says it restarts the dead one, the
replica comes back and gets traffic again, and a SIGTERM then stops everything, the restarted Triton included.

It runs the Makefile's own `up` recipe (`-o install`: the installer's work is done in this environment) on the fast
model, with its own run folder and ports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from localstack.net import bindable, free_port
from localstack.paths import FAST_MODEL_NAME, REPO_ROOT
from localstack.processes import stray_processes, wait_until
from localstack.stack_config import REPLICA_PORT_STEP

READY_LINE = "[up] ready in"
RESTARTING = "restarting it in place"
BACK = "is ready again after"


def _ports_with_room() -> dict[str, int]:
    """Triton's three ports, each free for replica 1 too (the port plus 100)."""
    while True:
        ports = {name: free_port() for name in ("TRITON_HTTP_PORT", "TRITON_GRPC_PORT", "TRITON_METRICS_PORT")}
        if all(bindable(port + REPLICA_PORT_STEP) for port in ports.values()):
            return ports


def _tritonserver_on(grpc_port: int) -> psutil.Process:
    """The `tritonserver` process a user would find with `ps`: the one listening on `grpc_port`."""
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] == "tritonserver" and f"--grpc-port={grpc_port}" in (process.info["cmdline"] or []):
            return process
    raise AssertionError(f"no tritonserver with --grpc-port={grpc_port}")


def _requests_to(base: str, replica: str) -> float:
    families = text_string_to_metric_families(httpx.get(f"{base}/metrics", timeout=10).text)
    return sum(
        sample.value
        for family in families
        for sample in family.samples
        if sample.name == "gateway_replica_requests_total" and sample.labels.get("replica") == replica
    )


class Client(threading.Thread):
    """Sends one completion after another until stopped, as a user's application would; keeps every outcome."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.outcomes: list[str] = []  # "200", or the status and body, or the exception
        self.stopped = threading.Event()

    def run(self) -> None:
        body = {"model": FAST_MODEL_NAME, "prompt": "Hello there", "max_tokens": 4, "ignore_eos": True}
        with httpx.Client(base_url=self.base, timeout=60) as client:
            while not self.stopped.wait(0.2):
                try:
                    reply = client.post("/v1/completions", json=body)
                    ok = reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 4
                    self.outcomes.append("200" if ok else f"{reply.status_code}: {reply.text[:200]}")
                except httpx.HTTPError as exc:
                    self.outcomes.append(f"{type(exc).__name__}: {exc}")


@pytest.mark.timeout(1500)
def test_make_up_restarts_a_killed_replica_while_the_other_serves(tmp_path: Path) -> None:
    run_dir = tmp_path / "up"
    ports = _ports_with_room()
    gateway_port = free_port()
    replica_grpc = ports["TRITON_GRPC_PORT"] + REPLICA_PORT_STEP
    env = {
        **os.environ,
        **{name: str(port) for name, port in ports.items()},
        "UP_RUN_DIR": str(run_dir),
        "MODEL": "",
        "MODEL_REPOSITORY": "",
        "GATEWAY_ROUTING": "round_robin",  # every other request goes to the killed replica while it is known
    }
    argv = ["make", "--no-print-directory", "-o", "install", "up", f"MODEL={FAST_MODEL_NAME}", "REPLICAS=2",
            f"PORT={gateway_port}"]  # fmt: skip
    output = tmp_path / "make.out"
    base = f"http://127.0.0.1:{gateway_port}"
    with open(output, "wb") as out:
        make = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    client = Client(base)
    try:
        ready = wait_until(lambda: READY_LINE in output.read_text(), 900, 1.0)
        assert ready and make.poll() is None, output.read_text()[-3000:]
        client.start()
        assert wait_until(lambda: len(client.outcomes) >= 4, 60, 0.2), client.outcomes

        killed = _tritonserver_on(replica_grpc)
        killed.send_signal(signal.SIGKILL)  # kill -9 <pid>
        assert wait_until(lambda: RESTARTING in output.read_text(), 30, 0.5), output.read_text()[-3000:]
        assert make.poll() is None, output.read_text()[-3000:]
        print("\n" + next(line for line in output.read_text().splitlines() if RESTARTING in line))

        assert wait_until(lambda: BACK in output.read_text(), 600, 1.0), output.read_text()[-3000:]
        restarted = _tritonserver_on(replica_grpc)
        assert restarted.pid != killed.pid
        back_at = len(client.outcomes)
        sent = _requests_to(base, f"127.0.0.1:{replica_grpc}")
        assert wait_until(lambda: _requests_to(base, f"127.0.0.1:{replica_grpc}") > sent, 30, 0.5), (
            "the restarted replica got no request"
        )
        client.stopped.set()
        client.join(timeout=90)
        failed = [outcome for outcome in client.outcomes if outcome != "200"]
        assert not failed, f"{len(failed)} of {len(client.outcomes)} requests failed: {failed[:5]}"
        after = len(client.outcomes) - back_at
        print(f"{len(client.outcomes)} requests, {after} after the replica was back; none failed")
        assert make.poll() is None, output.read_text()[-3000:]

        os.killpg(make.pid, signal.SIGTERM)
        make.wait(timeout=180)
        assert "[up] stopped." in output.read_text()
        for folder in (run_dir, run_dir / "replica-1"):
            assert not stray_processes(folder), f"still running after make returned: {stray_processes(folder)}"
        assert not restarted.is_running() and not killed.is_running()
    finally:
        client.stopped.set()
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        for folder in (run_dir, run_dir / "replica-1"):  # never leave a stack behind, even when the test failed
            for line in stray_processes(folder):
                psutil.Process(int(line.split(":", 1)[0])).kill()
