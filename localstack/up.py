"""`make up`: start the local stack, say where to send requests, stop everything on Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from pathlib import Path

from localstack.paths import REPO_ROOT
from localstack.stack import LocalStack, StackConfig, StackError


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=int(os.environ.get("GATEWAY_PORT", "9000")), help="gateway port")
    parser.add_argument("--host", default=os.environ.get("GATEWAY_HOST", "127.0.0.1"), help="gateway address")
    parser.add_argument("--run-dir", type=Path, default=REPO_ROOT / ".run" / "up")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    stack = LocalStack(StackConfig(run_dir=args.run_dir, gateway_port=args.port, gateway_host=args.host))
    started = time.monotonic()
    print("[up] starting Triton (vLLM engine, first start compiles for a few minutes) and the gateway...", flush=True)
    print(f"[up] logs: {args.run_dir}/triton.log, {args.run_dir}/gateway.log", flush=True)
    try:
        stack.start()
    except StackError as exc:
        print(f"[up] failed to start: {exc}", flush=True)
        return 1
    base = f"http://{'localhost' if args.host in ('127.0.0.1', '0.0.0.0') else args.host}:{args.port}"
    print(
        f"\n[up] ready in {time.monotonic() - started:.0f} s\n"
        f"     OpenAI base URL: {base}/v1   (model: {stack.config.model_name})\n"
        f"     Triton: HTTP {stack.triton_http_url}, gRPC 127.0.0.1:{stack.config.grpc_port}, "
        f"metrics {stack.triton_metrics_url}\n"
        "     Ctrl-C stops everything.\n",
        flush=True,
    )
    try:
        while not stop.wait(1.0):
            for service in (stack.triton, stack.gateway):
                if service is not None and not service.running():
                    print(f"[up] {service.name} exited; see {service.log_path}", flush=True)
                    return 1
        return 0
    finally:
        print("[up] stopping...", flush=True)
        stack.stop()
        print("[up] stopped.", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
