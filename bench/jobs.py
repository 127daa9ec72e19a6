"""Runs one load-generator process to completion and reads the JSON it wrote: each client runs apart
from the orchestrator and from the servers, and leaves its full output in a log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from localstack.paths import REPO_ROOT


class JobError(RuntimeError):
    """A load generator failed; the message carries the end of its log."""


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def run_module(module: str, args: list[str], log_path: Path, timeout_s: float) -> None:
    """`python -m module args...`, output to `log_path`; raises with the log's tail if it fails."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        try:
            process = subprocess.run(
                [sys.executable, "-m", module, *args],
                cwd=REPO_ROOT,
                env=bench_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise JobError(f"{module} did not finish in {timeout_s:.0f} s; see {log_path}") from None
    if process.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise JobError(f"{module} exited with {process.returncode}:\n{tail}")


def run_json(module: str, args: list[str], out: Path, timeout_s: float) -> dict[str, Any]:
    """A load generator that takes `--out FILE` and writes one JSON object there."""
    run_module(module, [*args, "--out", str(out)], out.with_suffix(".log"), timeout_s)
    return json.loads(out.read_text())
