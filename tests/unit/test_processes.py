"""Services: a stop asked for meanwhile (a signal to `make up`) ends a wait at once, and an engine's session
is ranked below the others."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from localstack.processes import Service, lower_session_priority, wait_until


def test_wait_until_gives_up_when_told_to() -> None:
    unless = threading.Event()
    threading.Timer(0.05, unless.set).start()
    started = time.monotonic()
    assert wait_until(lambda: False, timeout_s=30, interval_s=5, unless=unless) is False
    assert time.monotonic() - started < 5  # the wait between polls is cut short too


def test_wait_until_still_succeeds() -> None:
    calls = []
    assert wait_until(lambda: calls.append(1) or len(calls) == 3, timeout_s=5, interval_s=0.01, unless=threading.Event())


def test_an_engine_session_is_ranked_below_the_others(tmp_path: Path) -> None:
    """The kernel schedules each session as a group: the nice value must land on the service's session."""
    service = Service("sleeper", ["sleep", "30"], dict(os.environ), tmp_path / "sleeper.log")
    try:
        assert lower_session_priority(service.pid, 10)
        assert Path(f"/proc/{service.pid}/autogroup").read_text().split()[-1] == "10"
        assert Path(f"/proc/{os.getpid()}/autogroup").read_text() != Path(f"/proc/{service.pid}/autogroup").read_text()
    finally:
        service.stop(grace_s=1)
