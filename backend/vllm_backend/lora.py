"""Multi-LoRA, as the stock backend offers it.

`"enable_lora": true` in model.json turns it on; `multi_lora.json`, next to
model.json, maps adapter names to local folders; a request picks an adapter with
the sampling parameter `lora_name`. The adapters are checked when the model loads,
so a wrong path fails the load instead of the first request that names it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from vllm_backend.compat import LoRARequest

MULTI_LORA_FILE = "multi_lora.json"
# vLLM reads this file from every adapter folder.
_ADAPTER_CONFIG = "adapter_config.json"


class LoraError(ValueError):
    """A lora_name the backend refuses; the messages are the stock backend's, word for word."""


def lora_enabled(engine_args: dict[str, Any]) -> bool:
    """The stock backend takes true or "true" (any case) in model.json."""
    return str(engine_args.get("enable_lora", "")).lower() == "true"


def parse_multi_lora(content: Any, base_dir: str) -> dict[str, str]:
    """Adapter name -> absolute folder, in the file's order.

    Relative paths are taken from `base_dir` (the folder of multi_lora.json),
    not from the server's working directory, which a model repository cannot know.
    """
    if not isinstance(content, dict):
        raise ValueError(
            f"{MULTI_LORA_FILE} must be a JSON object of adapter name -> local folder, got {type(content).__name__}"
        )
    adapters: dict[str, str] = {}
    for name, path in content.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{MULTI_LORA_FILE}: adapter names must be non-empty strings, got {name!r}")
        if not isinstance(path, str) or not path.strip():
            raise ValueError(f"{MULTI_LORA_FILE}: adapter {name!r} needs a local folder path, got {path!r}")
        folder = os.path.abspath(os.path.join(base_dir, os.path.expanduser(path)))
        if not os.path.isdir(folder):
            raise ValueError(f"{MULTI_LORA_FILE}: adapter {name!r}: folder {folder} does not exist")
        if not os.path.isfile(os.path.join(folder, _ADAPTER_CONFIG)):
            raise ValueError(
                f"{MULTI_LORA_FILE}: adapter {name!r}: {folder} has no {_ADAPTER_CONFIG}, so it is not a LoRA adapter"
            )
        adapters[name] = folder
    return adapters


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.load keeps the last of two equal keys; an adapter silently lost is worse than an error."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"{MULTI_LORA_FILE}: adapter {key!r} is listed more than once")
        result[key] = value
    return result


def load_multi_lora(version_dir: str) -> dict[str, str]:
    """Reads and checks `<version_dir>/multi_lora.json`."""
    path = os.path.join(version_dir, MULTI_LORA_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            content = json.load(handle, object_pairs_hook=_unique_keys)
    except FileNotFoundError:
        raise ValueError(
            f'"enable_lora" is true in model.json, but {path} does not exist: it must map adapter names to '
            f'local folders, e.g. {{"my-adapter": "/models/my-adapter"}}'
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    return parse_multi_lora(content, version_dir)


def lora_table(engine_args: dict[str, Any], version_dir: str) -> dict[str, LoRARequest] | None:
    """The adapters a request may name, or None when LoRA is off.

    Ids are 1..N in the file's order and fixed for the model's life: vLLM caches
    loaded adapters by id, so one id must always mean the same adapter.
    """
    if not lora_enabled(engine_args):
        return None
    adapters = load_multi_lora(version_dir)
    return {
        name: LoRARequest(lora_name=name, lora_int_id=lora_id, lora_path=path)
        for lora_id, (name, path) in enumerate(adapters.items(), start=1)
    }


def resolve_lora(lora_name: str | None, table: dict[str, LoRARequest] | None) -> LoRARequest | None:
    """The adapter a request asked for (None for the base model)."""
    if lora_name is None:
        return None
    if table is None:
        raise LoraError("LoRA feature is not enabled.")
    if lora_name not in table:
        raise LoraError(f"LoRA {lora_name} is not supported, we currently support {list(table)}")
    return table[lora_name]
