"""A thread confined to one core still starts processes that may run on every core."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from vllm_backend.affinity import unconfined_thread

REPORT = "import os; print(sorted(os.sched_getaffinity(0)))"


def test_processes_started_inside_get_every_core_and_the_thread_goes_back() -> None:
    everything = sorted(os.sched_getaffinity(0))
    seen: dict[str, object] = {}

    def confined() -> None:
        os.sched_setaffinity(0, {everything[-1]})
        seen["outside"] = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True).stdout
        with unconfined_thread():
            seen["inside"] = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True).stdout
        seen["after"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=confined)
    thread.start()
    thread.join()
    assert json.loads(seen["outside"]) == [everything[-1]]
    assert set(json.loads(seen["inside"])) >= set(everything)
    assert seen["after"] == {everything[-1]}
