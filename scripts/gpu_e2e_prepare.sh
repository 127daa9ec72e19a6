#!/usr/bin/env bash
# Here, on a machine with pip and the project's venv: lays out in .gpu/ (ignored by git; carry .gpu/models and
# .gpu/testwheels with the checkout) what scripts/gpu_e2e.sh needs on a GPU host beside the checkout:
#   .gpu/models/tiny-random-llama   the one-layer random Llama (632 KB; localstack/fast_model.py, deterministic)
#   .gpu/testwheels/                the test-only wheels that host lacks
# The host already has pytest, pytest-timeout, httpx, numpy, psutil, pillow, prometheus-client (the image), and
# tritonclient, pydantic-settings, fastapi ... (install.sh); only pytest-asyncio is missing, which pyproject's
# asyncio settings are for. Usage: bash scripts/gpu_e2e_prepare.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=${PYTHON:-.venv/bin/python}
TEST_WHEELS=(pytest-asyncio==1.5.0)

mkdir -p .gpu
git check-ignore -q .gpu/models || { echo "gpu_e2e_prepare: .gpu/ is not ignored: add /.gpu/ to .git/info/exclude" >&2; exit 2; }
rm -rf .gpu/models/tiny-random-llama .gpu/testwheels && mkdir -p .gpu/models .gpu/testwheels

"$py" - <<'PY'
import shutil
from pathlib import Path

from localstack.paths import CachePaths, default_cache_dir
from localstack.prepare import DONE_MARKER, prepare_fast_model

source = prepare_fast_model(CachePaths(default_cache_dir()))  # built only when not prepared yet
shutil.copytree(source, Path(".gpu/models/tiny-random-llama"), ignore=shutil.ignore_patterns(DONE_MARKER))
PY
chmod -R a+rX .gpu/models

python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu/testwheels "${TEST_WHEELS[@]}" 2>&1 | { grep -v "is ignored" || true; }
ls -l .gpu/models/tiny-random-llama .gpu/testwheels
du -sh .gpu/models .gpu/testwheels
