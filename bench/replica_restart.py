"""Part 4's restart run: one replica's Triton restarted the way a rolling update does it, while the load goes on.

SIGTERM makes Triton drain (it reports not ready, finishes what it runs, and exits); the gateway sees it not ready
and sends it nothing new; it is then started again and, once ready, should get traffic again. Issue 24's target
is that no request fails through it. This runs beside the load (a thread of the bench's process) and tells the
load when to stop, by creating its stop file, `tail_s` after the replica is back."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from localstack.stack import LocalStack

DRAIN_GRACE_S = 60.0  # Triton's own drain ends at its exit timeout (30 s by default); then it is killed


def requests_sent_to(gateway_url: str, replica: str) -> float:
    """The gateway's count of requests it sent to `replica`, over every model."""
    text = httpx.get(f"{gateway_url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gateway_replica_requests_total" and sample.labels.get("replica") == replica
    )


class ReplicaRestart(threading.Thread):
    def __init__(
        self, replica: LocalStack, name: str, gateway_url: str, stop_file: Path, after_s: float, tail_s: float
    ) -> None:
        super().__init__(name="replica-restart", daemon=True)
        self.replica = replica
        self.replica_name = name  # as the gateway names it: host:port of its gRPC
        self.gateway_url = gateway_url
        self.stop_file = stop_file
        self.after_s = after_s
        self.tail_s = tail_s
        self.figures: dict[str, Any] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            time.sleep(self.after_s)
            triton = self.replica.triton
            assert triton is not None, "the replica's Triton is not running"
            sent_before = requests_sent_to(self.gateway_url, self.replica_name)
            started = time.monotonic()
            triton.stop(grace_s=DRAIN_GRACE_S)
            stopped = time.monotonic()
            self.replica.restart_triton()
            back = time.monotonic()
            sent_back = requests_sent_to(self.gateway_url, self.replica_name)
            time.sleep(self.tail_s)
            self.figures = {
                "replica": self.replica_name,
                "restarted_after_s": self.after_s,
                "drained_and_stopped_s": round(stopped - started, 2),
                "ready_again_s": round(back - stopped, 2),
                "requests_before": sent_before,
                "requests_while_away": sent_back - sent_before,
                "requests_after_back": requests_sent_to(self.gateway_url, self.replica_name) - sent_back,
                "tail_s": self.tail_s,
            }
        except BaseException as exc:  # reported by the caller; the load must stop either way
            self.error = exc
        finally:
            self.stop_file.touch()
