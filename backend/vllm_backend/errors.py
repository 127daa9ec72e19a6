"""Which exceptions mean "the request was wrong" rather than "the engine failed"."""

from __future__ import annotations

try:  # vLLM's errors caused by the request itself; older releases raise ValueError only
    from vllm.exceptions import VLLMClientError

    CLIENT_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, VLLMClientError)
except ImportError:  # pragma: no cover
    CLIENT_ERRORS = (ValueError, TypeError)
