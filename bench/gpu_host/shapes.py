"""Random-weight Llama folders for vLLM's `load_format: dummy`: the shapes of real models, no weights to ship.

The tokenizer is any model's (the default model's by default): only its vocabulary size reaches the shape.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

# Llama-3-8B and Llama-3.2-1B, less the vocabulary (the tokenizer's).
SHAPES: dict[str, dict[str, int]] = {
    "8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8},
    "1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
           "num_key_value_heads": 8},
}  # fmt: skip

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def llama_config(shape: str, vocab_size: int) -> dict[str, Any]:
    """A Hugging Face config.json for a Llama of the named shape."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
        **SHAPES[shape],
    }


def vocab_size(tokenizer_dir: Path) -> int:
    """The tokenizer's vocabulary, added tokens included."""
    spec = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    ids = list(spec["model"]["vocab"].values()) + [token["id"] for token in spec.get("added_tokens", [])]
    return max(ids) + 1


def write_dummy_model(shape: str, tokenizer_dir: Path, target: Path) -> Path:
    """`target`, holding the shape's config.json and the tokenizer's files."""
    target.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy2(tokenizer_dir / name, target / name)
    config = llama_config(shape, vocab_size(tokenizer_dir))
    (target / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return target
