"""Polling for a service: a stop asked for meanwhile (a signal to `make up`) ends the wait at once."""

from __future__ import annotations

import threading
import time

from localstack.processes import wait_until


def test_wait_until_gives_up_when_told_to() -> None:
    unless = threading.Event()
    threading.Timer(0.05, unless.set).start()
    started = time.monotonic()
    assert wait_until(lambda: False, timeout_s=30, interval_s=5, unless=unless) is False
    assert time.monotonic() - started < 5  # the wait between polls is cut short too


def test_wait_until_still_succeeds() -> None:
    calls = []
    assert wait_until(lambda: calls.append(1) or len(calls) == 3, timeout_s=5, interval_s=0.01, unless=threading.Event())
