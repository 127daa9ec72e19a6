"""`python -m gateway`: serve the gateway with uvicorn, configured from GATEWAY_* variables."""

from __future__ import annotations

import os

import uvicorn

from gateway.observability.multiprocess import shared_metrics_dir
from gateway.settings import get_settings


def main() -> None:
    settings = get_settings()
    # Read once, when gRPC starts in a worker: set before the app (and gRPC) is imported, and inherited by workers.
    os.environ["GRPC_EXPERIMENTS"] = settings.grpc_experiments
    with shared_metrics_dir(settings.workers, settings.prometheus_multiproc_dir):
        uvicorn.run(
            "gateway.app:create_app",
            factory=True,
            http="gateway.http_protocol:BoundedHeadProtocol",  # httptools, with GATEWAY_MAX_HEADER_BYTES
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            timeout_keep_alive=settings.keep_alive_s,
            log_level=settings.log_level,
            access_log=False,
        )


if __name__ == "__main__":
    main()
