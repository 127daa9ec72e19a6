"""Several gateway workers on one port: every scrape counts the requests of all of them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from localstack.processes import Service
from localstack.stack import LocalStack
from tests.metrics_text import sample_value

WORKERS = 2
REQUESTS = 16


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("multiproc")


@pytest.fixture(scope="module")
def workers_gateway(stack: LocalStack, shared_dir: Path) -> Iterator[tuple[Service, str]]:
    extra = {"GATEWAY_WORKERS": str(WORKERS), "PROMETHEUS_MULTIPROC_DIR": str(shared_dir)}
    with stack.extra_gateway("gateway-workers", extra) as (service, url):
        workers = _worker_pids(service)
        yield service, url
    assert not [pid for pid in workers if psutil.pid_exists(pid)], "a worker outlived the gateway"


def _worker_pids(service: Service) -> set[int]:
    return {p.pid for p in service.descendants() if "spawn_main" in " ".join(p.cmdline())}


def test_metrics_count_the_requests_of_every_worker(
    workers_gateway: tuple[Service, str], shared_dir: Path, model_name: str
) -> None:
    service, url = workers_gateway
    workers = _worker_pids(service)
    assert len(workers) == WORKERS

    def complete(i: int) -> None:
        body = {"model": model_name, "prompt": f"Worker test {i}:", "max_tokens": 4, "ignore_eos": True,
                "stream": i % 2 == 0}  # fmt: skip
        response = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
        assert response.status_code == 200, response.text

    with ThreadPoolExecutor(REQUESTS) as pool:
        list(pool.map(complete, range(REQUESTS)))

    # Each worker keeps its values in files named by its pid; both took part.
    writers = {int(m.group(1)) for f in shared_dir.iterdir() if (m := re.search(r"_(\d+)\.db$", f.name))}
    assert workers <= writers, (workers, writers)
    for _ in range(4):  # whichever worker answers the scrape, the totals are the same
        text = httpx.get(f"{url}/metrics", timeout=30).text
        assert sample_value(text, "gateway_requests_total", model=model_name, endpoint="completions",
                            outcome="ok") == REQUESTS  # fmt: skip
        assert sample_value(text, "http_requests_total", handler="/v1/completions", status="2xx") == REQUESTS
        assert sample_value(text, "gateway_completion_tokens_total", model=model_name) == 4 * REQUESTS
        assert sample_value(text, "gateway_requests_in_flight", model=model_name, endpoint="completions") == 0
        assert sample_value(text, "gateway_federation_up") == 1.0
        assert "\nvllm:num_requests_running" in text
