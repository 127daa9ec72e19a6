from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from vllm_backend.outbox import Outbox


class RecordingSender:
    """A response sender whose `send` takes a while, as a round trip to Triton does."""

    def __init__(self, log: list[tuple[str, Any, int]], name: str, delay_s: float = 0.0) -> None:
        self.log, self.name, self.delay_s = log, name, delay_s
        self.threads: set[str] = set()

    def send(self, response: Any = None, flags: int = 0) -> None:
        time.sleep(self.delay_s)
        self.threads.add(threading.current_thread().name)
        if response == "boom":
            raise RuntimeError("request already ended")
        self.log.append((self.name, response, flags))


def test_send_returns_at_once_and_close_delivers_everything_in_order() -> None:
    log: list[tuple[str, Any, int]] = []
    a, b = RecordingSender(log, "a", delay_s=0.01), RecordingSender(log, "b", delay_s=0.01)
    outbox = Outbox(on_error=lambda message: None)
    start = time.perf_counter()
    for i in range(20):
        outbox.send(a, f"a{i}")
        outbox.send(b, f"b{i}")
    outbox.send(a, None, 1)
    outbox.send(b, "b-last", 1)
    queued_in = time.perf_counter() - start
    outbox.close()
    assert queued_in < 0.1  # 42 sends of 10 ms each were not waited for
    assert [entry for entry in log if entry[0] == "a"] == [*(("a", f"a{i}", 0) for i in range(20)), ("a", None, 1)]
    assert [entry for entry in log if entry[0] == "b"] == [*(("b", f"b{i}", 0) for i in range(20)), ("b", "b-last", 1)]
    assert a.threads == {"vllm-backend-sender"}


def test_a_failed_send_is_reported_and_the_rest_still_go_out() -> None:
    log: list[tuple[str, Any, int]] = []
    errors: list[str] = []
    sender = RecordingSender(log, "a")
    outbox = Outbox(on_error=errors.append)
    outbox.send(sender, "boom")
    outbox.send(sender, "after", 1)
    outbox.close()
    assert errors == ["[vllm] could not send a response: request already ended"]
    assert log == [("a", "after", 1)]


def test_on_sent_runs_after_the_send_even_a_failed_one() -> None:
    log: list[tuple[str, Any, int]] = []
    sender = RecordingSender(log, "a", delay_s=0.01)
    sent: list[tuple[str, int]] = []
    outbox = Outbox(on_error=lambda message: None)
    outbox.send(sender, "first", on_sent=lambda: sent.append(("first", len(log))))
    outbox.send(sender, "boom", on_sent=lambda: sent.append(("boom", len(log))))
    outbox.send(sender, None, 1)
    outbox.close()
    assert sent == [("first", 1), ("boom", 1)]  # each after its own send was made
    assert log == [("a", "first", 0), ("a", None, 1)]


def test_several_threads_keep_each_requests_order_and_share_the_requests() -> None:
    log: list[tuple[str, Any, int]] = []
    senders = [RecordingSender(log, f"r{i}", delay_s=0.001) for i in range(16)]
    outbox = Outbox(on_error=lambda message: None, threads=4)
    for step in range(10):
        for sender in senders:
            outbox.send(sender, step)
    for sender in senders:
        outbox.send(sender, None, 1)
    outbox.close()
    for sender in senders:
        assert [entry[1:] for entry in log if entry[0] == sender.name] == [*((i, 0) for i in range(10)), (None, 1)]
        assert len(sender.threads) == 1  # one request, one thread: nothing overtakes
    assert len(set().union(*(sender.threads for sender in senders))) > 1


def test_an_outbox_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Outbox(on_error=lambda message: None, threads=0)
