"""What the local stack serves: a prepared model by name, any Hugging Face folder, or a whole Triton model
repository (`make up MODEL=...` / `make up MODEL_REPOSITORY=...`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localstack.model_repo import ENGINE_MEMORY_SHARE
from localstack.paths import DEFAULT_MODEL_NAME, FAST_MODEL_NAME, CachePaths

# The fast model's engine needs little memory (see `memory_share`).
FAST_MODEL_MEMORY_SHARE = 0.05


@dataclass(frozen=True)
class ServedModel:
    """One Hugging Face folder, the name Triton serves it under, its engine's share of memory, and whether the
    serving processes keep off the engine's compute cores (`localstack.placement`)."""

    name: str
    folder: Path
    memory_share: float
    keep_off_engine_cores: bool = True


def prepared_models(cache: CachePaths) -> dict[str, ServedModel]:
    """The models `python -m localstack.prepare` builds, by the names they are served under."""
    folders = {DEFAULT_MODEL_NAME: cache.default_model_dir, FAST_MODEL_NAME: cache.fast_model_dir}
    return {name: _served(name, folder) for name, folder in folders.items()}


def _served(name: str, folder: Path) -> ServedModel:
    return ServedModel(name, folder, memory_share(name), keep_off_engine_cores=is_compute_bound(name))


def memory_share(name: str) -> float:
    """The share of the machine's memory an engine reserves for this model (vLLM's `gpu_memory_utilization`).

    On the CPU, vLLM reserves share x RAM for its worker process: the process itself (about 0.7 GiB, torch and
    the compiled model), then the weights, then a KV cache filling the rest. The default 0.4 suits a real
    model; the tiny random Llama has 0.6 MB of weights and 512 bytes of KV cache per token, so 0.05 (1.2 GiB of
    24) still holds a million tokens, and the test session, which runs it beside the default model, does not
    need two 0.4 shares at once. Any other model gets the default.
    """
    return FAST_MODEL_MEMORY_SHARE if name == FAST_MODEL_NAME else ENGINE_MEMORY_SHARE


def is_compute_bound(name: str) -> bool:
    """Whether the model's CPU engine is limited by its forward pass, so that the serving processes should keep
    off its compute cores. Not the fast model: confining Triton, the stubs and the gateway to the one core its
    engine leaves free halves what the path carries (part 3 at 256 streams: 3,597 against 1,695 tokens/s for
    completions, 3,022 against 1,544 for chat; bench/README.md)."""
    return name != FAST_MODEL_NAME



def resolve_model(choice: str, cache: CachePaths) -> ServedModel:
    """`choice` is a prepared model's name (looked up first) or a Hugging Face folder, which is served under
    its folder's name lowercased, as Triton model names usually are."""
    prepared = prepared_models(cache)
    if choice in prepared:
        return prepared[choice]
    folder = Path(choice).expanduser().resolve()
    if not (folder / "config.json").is_file():
        names = ", ".join(sorted(prepared))
        raise ValueError(f"MODEL={choice!r} is neither a prepared model ({names}) nor a folder with a config.json")
    name = folder.name.lower()
    return _served(name, folder)


def repository_models(repository: Path) -> list[str]:
    """The models of a Triton model repository: its folders holding a config.pbtxt, in name order."""
    if not repository.is_dir():
        raise ValueError(f"MODEL_REPOSITORY={str(repository)!r} is not a folder")
    models = sorted(entry.name for entry in repository.iterdir() if (entry / "config.pbtxt").is_file())
    if not models:
        raise ValueError(f"MODEL_REPOSITORY={str(repository)!r} has no model folder (none holds a config.pbtxt)")
    return models
