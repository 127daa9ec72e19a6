"""Several gateway workers behind one port, with metrics that count every worker.

prometheus_client's multiprocess mode keeps each worker's values in files of one folder,
named by PROMETHEUS_MULTIPROC_DIR; a scrape, answered by any worker, merges them all.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest, multiprocess

ENV_VAR = "PROMETHEUS_MULTIPROC_DIR"


@contextmanager
def shared_metrics_dir(workers: int, given: str | None) -> Iterator[str | None]:
    """The folder the workers share for the run, emptied first; a temporary one unless given.

    Set in the supervisor's environment before the workers start, because prometheus_client
    reads it when a worker first imports it.
    """
    if workers <= 1:
        yield given
        return
    if given:
        for stale in Path(given).glob("*.db"):  # values of an earlier run would be added in
            stale.unlink()
        yield given
        return
    path = tempfile.mkdtemp(prefix="gateway-metrics-")
    os.environ[ENV_VAR] = path
    try:
        yield path
    finally:
        os.environ.pop(ENV_VAR, None)
        shutil.rmtree(path, ignore_errors=True)


def exposition(registry: CollectorRegistry, shared_dir: str | None) -> bytes:
    """This worker's metrics alone, or, with a shared folder, every worker's merged."""
    if not shared_dir:
        return generate_latest(registry)
    merged = CollectorRegistry()
    multiprocess.MultiProcessCollector(merged, path=shared_dir)
    return generate_latest(merged)


def forget_this_worker(shared_dir: str | None) -> None:
    """Drops this worker's live gauges (requests in flight) when it stops."""
    if shared_dir:
        multiprocess.mark_process_dead(os.getpid(), path=shared_dir)
