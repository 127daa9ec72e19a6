"""Logging set-up: request log lines are JSON objects, one per line."""

from __future__ import annotations

import logging
import sys


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    requests = logging.getLogger("gateway.requests")
    requests.handlers[:] = [handler]
    requests.setLevel(level.upper())
    requests.propagate = False
