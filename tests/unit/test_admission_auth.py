"""Auth on every route of the real app, without Triton: who gets a 401, what stays open, what is logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from gateway.admission import KeyStore
from gateway.app import create_app
from gateway.settings import Settings
from localstack.net import free_port

KEY = "sk-test-key-1"


def _client(**settings: str) -> Iterator[TestClient]:
    nowhere = f"127.0.0.1:{free_port()}"
    config = Settings(triton_grpc_url=nowhere, triton_metrics_urls=[f"http://{nowhere}/metrics"], **settings)
    with TestClient(create_app(config), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[TestClient]:
    yield from _client(api_keys=KEY, metrics_api_key="sk-metrics")


def _routes(client: TestClient) -> list[tuple[str, str]]:
    routes = []
    for route in client.app.routes:  # type: ignore[attr-defined]
        methods = route.methods if isinstance(route, APIRoute) else getattr(route, "methods", None) or {"GET"}
        path = route.path.replace("{model_id:path}", "m")
        routes += [(method, path) for method in sorted(methods) if method != "HEAD"]
    return routes


def test_every_route_but_health_needs_a_key(keyed: TestClient) -> None:
    routes = _routes(keyed)
    assert ("POST", "/v1/chat/completions") in routes and ("GET", "/metrics") in routes
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": f"Basic {KEY}"}):
            response = keyed.request(method, path, headers=headers, json={})
            if path.startswith("/health/"):
                assert response.status_code != 401, (method, path)
                continue
            assert response.status_code == 401, (method, path, headers, response.text)
            error = response.json()["error"]
            assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
            assert set(error) == {"message", "type", "param", "code"}
            assert response.headers["www-authenticate"] == "Bearer"


def test_metrics_take_the_metrics_key_only(keyed: TestClient) -> None:
    assert keyed.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 401
    scrape = keyed.get("/metrics", headers={"Authorization": "Bearer sk-metrics"})
    assert scrape.status_code == 200
    assert 'gateway_rejections_total{key="none",reason="auth"}' in scrape.text


def test_a_good_key_passes_and_is_logged_by_name_only(keyed: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.requests")
    response = keyed.post("/v1/completions", headers={"Authorization": f"Bearer {KEY}"}, json={"prompt": "x"})
    assert response.status_code == 400  # past auth: the body is checked
    [line] = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.requests"]
    assert line["key"] == "env-1"
    assert KEY not in caplog.text


def test_without_keys_the_gateway_is_open_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gateway")
    for client in _client():
        assert client.get("/metrics").status_code == 200
        assert client.post("/v1/completions", json={"prompt": "x"}).status_code == 400
    warnings = [r.getMessage() for r in caplog.records if "no API key is configured" in r.getMessage()]
    assert len(warnings) == 1


def test_an_empty_keys_file_closes_the_gateway(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    keys.write_text("# no keys yet\n")
    for client in _client(api_keys_file=str(keys)):
        assert client.post("/v1/completions", json={"prompt": "x"}).status_code == 401
        assert client.get("/metrics").status_code == 200
        assert client.get("/health/live").status_code == 200


def test_a_bad_keys_file_stops_the_start(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    keys.write_text('{"name": "a"}\n')
    with pytest.raises(ValueError, match="line 1"):
        create_app(Settings(api_keys_file=str(keys)))


def test_a_keys_file_that_no_longer_parses_keeps_the_keys_in_force(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    keys.write_text('{"name": "a", "key": "sk-a"}\n')
    store = KeyStore(None, str(keys))
    keys.write_text('{"name": "a", "key": "sk-a"}\n{"name": "b"}\n')
    assert not store.reload()
    assert store.table.lookup("sk-a").name == "a"
    keys.write_text('{"name": "b", "key": "sk-b"}\n')
    assert store.reload() and not store.reload()  # read again only when it changed
    assert store.table.lookup("sk-a") is None and store.table.lookup("sk-b").name == "b"


def test_responses_admission_did_not_see_carry_the_keys_ratelimit_headers(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    keys.write_text('{"name": "a", "key": "sk-a", "rpm": 7, "tpm": 70}\n{"name": "b", "key": "sk-b"}\n')
    for client in _client(api_keys_file=str(keys)):
        invalid = client.post("/v1/completions", headers={"Authorization": "Bearer sk-a"}, json={"prompt": "x"})
        assert invalid.status_code == 400
        assert invalid.headers["x-ratelimit-limit-requests"] == "7"
        assert invalid.headers["x-ratelimit-remaining-requests"] == "7"  # nothing was counted
        assert invalid.headers["x-ratelimit-limit-tokens"] == "70"
        unlimited = client.post("/v1/completions", headers={"Authorization": "Bearer sk-b"}, json={"prompt": "x"})
        assert not any(name.startswith("x-ratelimit") for name in unlimited.headers)


def test_metrics_show_the_workers_asyncio_tasks() -> None:
    for client in _client():
        tasks = [line for line in client.get("/metrics").text.splitlines() if line.startswith("gateway_asyncio_tasks")]
        assert len(tasks) == 1 and float(tasks[0].split()[-1]) >= 1, tasks
