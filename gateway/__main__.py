"""`python -m gateway`: serve the gateway with uvicorn, configured from GATEWAY_* variables."""

from __future__ import annotations

import os
import signal
import sys

import uvicorn

from gateway.drain.signals import SERVER_GRACE_S
from gateway.observability.multiprocess import shared_metrics_dir
from gateway.settings import get_settings

# With GATEWAY_WORKERS > 1, uvicorn's supervisor pings each worker and kills one that does not answer within this
# long, then starts another. Its default, 5 s, killed a worker that was busy with streams on two loaded cores (and
# the streams with it): only a worker silent this long is taken for hung.
WORKER_HEALTHCHECK_S = 30


def _exit_cleanly(signum: int, frame: object) -> None:
    """A SIGTERM is how the gateway is asked to stop: exit 0. uvicorn raises the signal again for this handler
    once it has shut down (after the drain), and it ends the process before the server runs too."""
    sys.exit(0)


def main() -> None:
    settings = get_settings()
    # Read once, when gRPC starts in a worker: set before the app (and gRPC) is imported, and inherited by workers.
    os.environ["GRPC_EXPERIMENTS"] = settings.grpc_experiments
    signal.signal(signal.SIGTERM, _exit_cleanly)
    with shared_metrics_dir(settings.workers, settings.prometheus_multiproc_dir):
        uvicorn.run(
            "gateway.app:create_app",
            factory=True,
            http="gateway.http_protocol:BoundedHeadProtocol",  # httptools, with GATEWAY_MAX_HEADER_BYTES
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            timeout_keep_alive=settings.keep_alive_s,
            # The drain (gateway/drain/) has ended the generations when uvicorn starts its own shutdown;
            # whatever else is still open gets this long.
            timeout_graceful_shutdown=SERVER_GRACE_S,
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
            log_level=settings.log_level,
            access_log=False,
        )


if __name__ == "__main__":
    main()
