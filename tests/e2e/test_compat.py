"""The stack runs the vLLM it was asked for (make test-compat VLLM=<version>): the other e2e checks of the
compat run are only worth something if the stub really embedded that venv's vLLM."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from localstack.stack import LocalStack


def test_the_stub_runs_the_requested_vllm(stack: LocalStack) -> None:
    venv = stack.config.backend_venv
    prefix = str(venv if venv is not None else Path(sys.prefix)).rstrip("/") + "/"
    log = (stack.config.run_dir / "triton.log").read_text(errors="replace")
    lines = [line for line in log.splitlines() if "[vllm] vLLM " in line and "compat:" in line]
    assert lines, "the backend did not log the vLLM it loaded"
    expected = os.environ.get("EXPECT_VLLM")
    if expected:
        assert f"vLLM {expected}" in lines[-1] or f"vLLM {expected}+" in lines[-1], lines[-1]
    resolved = str(Path(prefix).resolve()) + "/"
    assert prefix in lines[-1] or resolved in lines[-1], lines[-1]
    # The engine process has the venv's torch mapped, not the project's.
    engines = stack.engine_processes()
    assert engines, "no engine process"
    mapped = {m.path for m in engines[0].memory_maps() if "libtorch" in m.path}
    assert mapped and all(p.startswith((prefix, resolved)) for p in mapped), mapped
