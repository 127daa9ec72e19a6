"""gRPC's experiment switches reach gRPC before the app is imported, in every worker."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import gateway.__main__ as entry
from gateway.settings import Settings, get_settings


@pytest.fixture
def captured_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    seen: dict[str, Any] = {}

    def fake_run(app: str, **kwargs: Any) -> None:
        seen["GRPC_EXPERIMENTS"] = os.environ.get("GRPC_EXPERIMENTS")
        seen["app"] = app

    monkeypatch.setattr(entry.uvicorn, "run", fake_run)
    before = os.environ.get("GRPC_EXPERIMENTS")  # main() sets it for real: put back what the process had
    get_settings.cache_clear()
    yield seen
    get_settings.cache_clear()
    if before is None:
        os.environ.pop("GRPC_EXPERIMENTS", None)
    else:
        os.environ["GRPC_EXPERIMENTS"] = before


def test_the_classic_poller_is_the_default(monkeypatch: pytest.MonkeyPatch, captured_run: dict[str, Any]) -> None:
    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    assert Settings().grpc_experiments == "-event_engine_client"
    entry.main()
    assert captured_run == {"GRPC_EXPERIMENTS": "-event_engine_client", "app": "gateway.app:create_app"}


def test_a_value_of_the_users_own_is_kept(monkeypatch: pytest.MonkeyPatch, captured_run: dict[str, Any]) -> None:
    monkeypatch.setenv("GRPC_EXPERIMENTS", "")  # gRPC's own defaults
    entry.main()
    assert captured_run["GRPC_EXPERIMENTS"] == ""
