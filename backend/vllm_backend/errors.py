"""Which exceptions mean "the request was wrong" rather than "the engine failed" (chosen in `compat`)."""

from __future__ import annotations

from vllm_backend.compat import CLIENT_ERRORS

__all__ = ["CLIENT_ERRORS"]
