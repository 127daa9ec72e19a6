"""A Triton request's input tensors, read as the backend needs them (pb_utils exists only in Triton's stub)."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils


class RequestError(ValueError):
    """A request the backend refuses; the message is returned to the client."""


def tensor(request: Any, name: str) -> np.ndarray | None:
    found = pb_utils.get_input_tensor_by_name(request, name)
    return None if found is None else found.as_numpy()


def scalar(request: Any, name: str) -> Any:
    array = tensor(request, name)
    if array is None or array.size == 0:
        return None
    return array.reshape(-1)[0]


def flag(request: Any, name: str, default: bool = False) -> bool:
    value = scalar(request, name)
    return default if value is None else bool(value)
