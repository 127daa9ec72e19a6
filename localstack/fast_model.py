"""A tiny random-weight Llama, as a real Hugging Face folder that vLLM's engine loads.

One layer of hidden size 128 makes each engine step take milliseconds on a CPU, so vLLM's real engine (the
same AsyncLLM front end a GPU uses) produces tokens faster than any front end can carry them: a load test on
it measures the serving path, as on a GPU, and not the CPU's matrix multiplications. Only the weights are made
up; the tokenizer is a real byte-level BPE, trained here on the interpreter's own docstrings (no network).
"""

from __future__ import annotations

import builtins
import json
import string
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 512
HIDDEN_SIZE = 128
INTERMEDIATE_SIZE = 256
ATTENTION_HEADS = 2
KV_HEADS = 2
HEAD_SIZE = 64
MAX_POSITIONS = 4096
WEIGHT_STD = 0.02
SEED = 22

UNK, BOS, EOS, PAD = "<unk>", "<s>", "</s>", "<pad>"
SPECIAL_TOKENS = [UNK, BOS, EOS, PAD]

# Each turn closes with the end-of-sequence token, so a chat answer ends where the model says so.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def training_text() -> list[str]:
    """Deterministic English for the tokenizer: the builtins' docstrings, and every printable ASCII character.

    The printable characters make every ASCII text encodable; non-ASCII text maps to `<unk>`. Without
    the 128 other byte values in the vocabulary, every token decodes to whole characters, so random
    output streams as text rather than as bytes waiting to complete a UTF-8 sequence.
    """
    docs = [getattr(builtins, name).__doc__ or "" for name in sorted(dir(builtins))]
    return [string.printable, *(doc for doc in docs if doc)]


def train_tokenizer(vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """A byte-level BPE whose vocabulary holds the special tokens first, then ASCII and its merges."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    tokenizer.train_from_iterator(training_text(), trainer=trainer)
    return tokenizer


def tokenizer_config() -> dict:
    """What `AutoTokenizer.from_pretrained` reads beside tokenizer.json, written out rather than left to
    the installed transformers' defaults, so the folder is the same with any version."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": UNK,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def model_config(vocab_size: int, token_ids: dict[str, int]) -> dict:
    """config.json: a one-layer Llama in bf16, like the default model's dtype."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": 1,
        "num_attention_heads": ATTENTION_HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_SIZE,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": token_ids[BOS],
        "eos_token_id": token_ids[EOS],
        "pad_token_id": token_ids[PAD],
        "dtype": "bfloat16",
    }


def weight_shapes(vocab_size: int) -> dict[str, tuple[int, ...]]:
    """The tensors of LlamaForCausalLM with one layer, by the names vLLM's loader expects."""
    attention = ATTENTION_HEADS * HEAD_SIZE
    kv = KV_HEADS * HEAD_SIZE
    layer = "model.layers.0"
    return {
        "model.embed_tokens.weight": (vocab_size, HIDDEN_SIZE),
        f"{layer}.input_layernorm.weight": (HIDDEN_SIZE,),
        f"{layer}.self_attn.q_proj.weight": (attention, HIDDEN_SIZE),
        f"{layer}.self_attn.k_proj.weight": (kv, HIDDEN_SIZE),
        f"{layer}.self_attn.v_proj.weight": (kv, HIDDEN_SIZE),
        f"{layer}.self_attn.o_proj.weight": (HIDDEN_SIZE, attention),
        f"{layer}.post_attention_layernorm.weight": (HIDDEN_SIZE,),
        f"{layer}.mlp.gate_proj.weight": (INTERMEDIATE_SIZE, HIDDEN_SIZE),
        f"{layer}.mlp.up_proj.weight": (INTERMEDIATE_SIZE, HIDDEN_SIZE),
        f"{layer}.mlp.down_proj.weight": (HIDDEN_SIZE, INTERMEDIATE_SIZE),
        "model.norm.weight": (HIDDEN_SIZE,),
        "lm_head.weight": (vocab_size, HIDDEN_SIZE),
    }


def random_weights(vocab_size: int, seed: int = SEED) -> dict[str, torch.Tensor]:
    """Seeded normal weights (norms at one, as initialized), so every build writes the same file."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in weight_shapes(vocab_size).items():
        if len(shape) == 1:
            tensor = torch.ones(shape)
        else:
            tensor = torch.randn(shape, generator=generator) * WEIGHT_STD
        weights[name] = tensor.to(torch.bfloat16).contiguous()
    return weights


def _write_json(path: Path, content: dict) -> None:
    path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")


def build_fast_model(target: Path) -> Path:
    """Write the whole folder: config, weights, tokenizer with its chat template, generation config."""
    target.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    vocab_size = tokenizer.get_vocab_size()
    token_ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    tokenizer.save(str(target / "tokenizer.json"))
    _write_json(target / "tokenizer_config.json", tokenizer_config())
    _write_json(target / "config.json", model_config(vocab_size, token_ids))
    generation = {key: token_ids[token] for key, token in (("bos_token_id", BOS), ("eos_token_id", EOS))}
    _write_json(target / "generation_config.json", {**generation, "pad_token_id": token_ids[PAD]})
    save_file(random_weights(vocab_size), str(target / "model.safetensors"), metadata={"format": "pt"})
    return target
