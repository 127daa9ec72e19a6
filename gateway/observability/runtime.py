"""The gateway process's own runtime figures, read at scrape time (no debug endpoint needed to see a leak)."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Gauge


class RuntimeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.asyncio_tasks = Gauge(
            "gateway_asyncio_tasks",
            "Asyncio tasks alive in the worker's event loop when scraped; back to its idle value once requests end.",
            registry=registry,
            multiprocess_mode="liveall",
        )

    def refresh(self) -> None:
        """Called by the scrape, from the event loop."""
        self.asyncio_tasks.set(len(asyncio.all_tasks()))
