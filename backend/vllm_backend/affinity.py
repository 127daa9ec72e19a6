"""The engine starts with every core the host allows, whatever cores the serving process is confined to.

vLLM's CPU workers bind their compute threads to cores taken from the affinity they inherit, keeping the last
core for other processes. A stub confined to the spare cores (the local stack pins Triton there) would pass
that confinement on, and a reloaded engine would then compute on the very core it should leave free.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def unconfined_thread() -> Iterator[None]:
    """For processes started inside the block: the calling thread may run anywhere, then goes back."""
    before = os.sched_getaffinity(0)
    # The kernel narrows the request to what the host (its cpuset) allows.
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
