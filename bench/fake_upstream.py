"""An upstream that costs nothing: real Triton serving bench/fake_model.py under our model's name (and a
slow twin for holding many streams open), with the gateway in front, started like the local stack."""

from __future__ import annotations

import shutil
from pathlib import Path

from localstack.paths import DEFAULT_MODEL_NAME
from localstack.stack import LocalStack, StackError
from localstack.stack_config import StackConfig

FAKE_MODEL_SOURCE = Path(__file__).with_name("fake_model.py")
SLOW_MODEL_NAME = f"{DEFAULT_MODEL_NAME}-slow"

_STRING, _BOOL = "TYPE_STRING", "TYPE_BOOL"
# What the gateway sends (gateway/core/triton_codec.py), all optional as in our backend.
INPUTS = [
    ("text_input", _STRING),
    ("messages", _STRING),
    ("chat_template_kwargs", _STRING),
    ("stream", _BOOL),
    ("exclude_input_in_output", _BOOL),
    ("return_finish_reason", _BOOL),
    ("return_num_input_tokens", _BOOL),
    ("return_num_output_tokens", _BOOL),
    ("return_logprobs", _BOOL),
    ("sampling_parameters", _STRING),
    ("sparse_outputs", _BOOL),
]
OUTPUTS = [
    ("text_output", _STRING, -1),
    ("finish_reason", _STRING, -1),
    ("num_input_tokens", "TYPE_UINT32", 1),
    ("num_output_tokens", "TYPE_UINT32", -1),
]


def model_config(token_delay_s: float) -> str:
    inputs = ",\n".join(
        f'  {{ name: "{name}" data_type: {dtype} dims: [ 1 ] optional: true }}' for name, dtype in INPUTS
    )
    outputs = ",\n".join(f'  {{ name: "{name}" data_type: {dtype} dims: [ {dim} ] }}' for name, dtype, dim in OUTPUTS)
    return (
        'backend: "python"\n'
        "max_batch_size: 0\n"
        "model_transaction_policy { decoupled: true }\n"
        f"input [\n{inputs}\n]\n"
        f"output [\n{outputs}\n]\n"
        "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
        f'parameters {{ key: "TOKEN_DELAY_S" value: {{ string_value: "{token_delay_s}" }} }}\n'
    )


def write_fake_repository(target: Path, models: dict[str, float]) -> Path:
    """One fake model per name, each with its per-token delay in seconds."""
    for name, delay_s in models.items():
        folder = target / name
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(model_config(delay_s))
        shutil.copy2(FAKE_MODEL_SOURCE, folder / "1" / "model.py")
    return target


class FakeUpstreamStack(LocalStack):
    """LocalStack with the vLLM model swapped for the fake ones; its env, backends and gateway are reused."""

    def __init__(self, config: StackConfig, slow_token_delay_s: float = 0.1) -> None:
        super().__init__(config)
        self.models = {config.model_name: 0.0, SLOW_MODEL_NAME: slow_token_delay_s}

    def start_triton(self) -> None:
        cfg = self.config
        if not cfg.cache.triton_bin.is_file():
            raise StackError(f"Triton is not installed in {cfg.cache.root}: run scripts/install.sh")
        repository = write_fake_repository(cfg.run_dir / "fake_repository", self.models)
        self.triton = self._triton_service("triton-fake", repository, list(self.models), f"tvgb{cfg.grpc_port}_")
