"""The tiny random Llama's folder: config, weights and tokenizer agree, and every build writes the same files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer

from localstack.fast_model import EOS, HEAD_SIZE, VOCAB_SIZE, build_fast_model, weight_shapes

FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fast_model(tmp_path_factory.mktemp("fast") / "tiny-random-llama")


def test_config_and_tokenizer_agree(folder: Path) -> None:
    config = AutoConfig.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert config.architectures == ["LlamaForCausalLM"] and config.num_hidden_layers == 1
    assert config.hidden_size // config.num_attention_heads == config.head_dim == HEAD_SIZE
    assert config.vocab_size == len(tokenizer) == VOCAB_SIZE
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tokenizer.eos_token_id


def test_weights_have_the_configs_shapes(folder: Path) -> None:
    config = AutoConfig.from_pretrained(folder)
    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        shapes = {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}
        assert {weights.get_slice(name).get_dtype() for name in weights.keys()} == {"BF16"}
    assert shapes == weight_shapes(config.vocab_size)


@pytest.mark.parametrize("text", ["Hello, world!", "def f(x):\n\treturn x ** 2  # squared", "~{}[]|\\^`$@"])
def test_ascii_text_round_trips(folder: Path, text: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


def test_english_takes_fewer_tokens_than_characters(folder: Path) -> None:
    text = "Return the number of items in a container."
    assert len(AutoTokenizer.from_pretrained(folder).encode(text, add_special_tokens=False)) < len(text) / 2


def test_every_token_decodes_to_whole_characters(folder: Path) -> None:
    """Random output streams as text: no token is a fragment of a UTF-8 sequence."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert "\ufffd" not in tokenizer.decode(list(range(len(tokenizer))))


def test_chat_template_renders(folder: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == f"<|system|>\nBe brief.{EOS}\n<|user|>\nHi{EOS}\n<|assistant|>\n"


def test_building_is_deterministic(folder: Path, tmp_path: Path) -> None:
    again = build_fast_model(tmp_path / "again")
    for name in FILES:
        assert (again / name).read_bytes() == (folder / name).read_bytes(), name
