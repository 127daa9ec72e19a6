"""`make up`: start the local stack, say where to send requests, stop everything on Ctrl-C or SIGTERM.

`MODEL` (or --model) picks what it serves: a prepared model's name (smollm2-135m-instruct, the default, or
tiny-random-llama) or a Hugging Face folder; `MODEL_REPOSITORY` (or --model-repository) serves a whole Triton
model repository as it is.

It returns only once everything it started has exited (Triton, its stubs, vLLM's engines, the gateway), so
that the next `make up` finds its ports free. A signal while the stack starts stops it at once. With REPLICAS of 2
or more, a replica whose Triton dies is started again in place while the gateway serves from the others
(localstack/supervision.py); only the gateway's exit, or a replica that keeps failing, ends it.
"""

from __future__ import annotations

import argparse
import os
import signal

import time
from pathlib import Path

from localstack.model_choice import resolve_model
from localstack.paths import REPO_ROOT, CachePaths, default_cache_dir
from localstack.stack import LocalStack, StackError
from localstack.stack_config import StackConfig
from localstack.processes import SignalFlag
from localstack.supervision import ReplicaSupervisor

def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=int(os.environ.get("GATEWAY_PORT", "9000")), help="gateway port")
    parser.add_argument("--host", default=os.environ.get("GATEWAY_HOST", "127.0.0.1"), help="gateway address")
    parser.add_argument("--run-dir", type=Path, default=os.environ.get("UP_RUN_DIR") or REPO_ROOT / ".run" / "up")
    # An empty variable (the Makefile passes MODEL= when none is given) means unset.
    parser.add_argument("--model", default=os.environ.get("MODEL") or None, help="a prepared model or a folder")
    parser.add_argument("--model-repository", type=Path, default=os.environ.get("MODEL_REPOSITORY") or None)
    parser.add_argument(
        "--replicas", type=int, default=int(os.environ.get("REPLICAS") or 1),
        help="Triton replicas behind the gateway, each with its own engine (ports + 100 per replica)",
    )
    for name, port in (("http", 8000), ("grpc", 8001), ("metrics", 8002)):
        default = int(os.environ.get(f"TRITON_{name.upper()}_PORT") or port)
        parser.add_argument(f"--{name}-port", type=int, default=default, help=f"Triton's {name} port")
    return parser.parse_args(argv)

def stack_config(args: argparse.Namespace, cache: CachePaths) -> StackConfig:
    """The stack `args` ask for; ValueError when the model or repository named does not exist."""
    if args.model and args.model_repository:
        raise ValueError("give MODEL or MODEL_REPOSITORY, not both")
    ports = {
        "gateway_port": args.port,
        "gateway_host": args.host,
        "http_port": args.http_port,
        "grpc_port": args.grpc_port,
        "metrics_port": args.metrics_port,
    }
    if args.replicas < 1:
        raise ValueError("REPLICAS must be 1 or more")
    settings = {"run_dir": args.run_dir, "cache": cache, "replicas": args.replicas, **ports}
    if args.model_repository is not None:
        return StackConfig.serving_repository(args.model_repository.resolve(), **settings)
    if args.model:
        return StackConfig.serving(resolve_model(args.model, cache), **settings)
    return StackConfig(**settings)

def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        stack = LocalStack(stack_config(args, CachePaths(default_cache_dir())))
    except ValueError as exc:
        print(f"[up] {exc}", flush=True)
        return 2
    stop = SignalFlag()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()
        stack.interrupt()

    # `make` passes a SIGTERM on to this process as well: a second signal changes nothing.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    started = time.monotonic()
    print("[up] starting Triton (vLLM engine, first start compiles for a few minutes) and the gateway...", flush=True)
    print(f"[up] logs: {args.run_dir}/triton.log, {args.run_dir}/gateway.log", flush=True)
    try:
        stack.start()  # on failure or interruption, it has stopped what it started
    except StackError as exc:
        if stop.is_set():
            print("[up] stopped before it was ready.", flush=True)
            return 0
        print(f"[up] failed to start: {exc}", flush=True)
        return 1
    base = f"http://{'localhost' if args.host in ('127.0.0.1', '0.0.0.0') else args.host}:{args.port}"
    print(
        f"\n[up] ready in {time.monotonic() - started:.0f} s\n"
        f"     OpenAI base URL: {base}/v1   (model: {', '.join(stack.served_models())})\n"
        + "".join(
            f"     Triton: HTTP {s.triton_http_url}, gRPC 127.0.0.1:{s.config.grpc_port}, metrics {s.triton_metrics_url}\n"
            for s in (stack, *stack.replicas)
        )
        + "     Ctrl-C stops everything.\n",
        flush=True,
    )
    # Several replicas: one that dies is started again while the others serve. One: the stack cannot serve.
    supervisor = ReplicaSupervisor(stack, lambda line: print(line, flush=True)) if stack.replicas else None
    try:
        while not stop.wait(1.0):
            watched = (stack.gateway,) if supervisor else (stack.gateway, stack.triton)
            for service in watched:
                if service is not None and not service.running():
                    print(f"[up] {service.name} exited; see {service.log_path}", flush=True)
                    return 1
            failure = supervisor.check() if supervisor else None
            if failure is not None and not stop.is_set():
                print(f"[up] {failure}", flush=True)
                return 1
        return 0
    finally:
        print("[up] stopping...", flush=True)
        stack.stop()
        print("[up] stopped.", flush=True)

if __name__ == "__main__":
    raise SystemExit(main())
