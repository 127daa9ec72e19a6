"""The responses store on SQLite (tests/e2e/test_responses_postgres.py runs these same tests on PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from gateway.responses.store import SCHEMA_VERSION, ResponseStore, database_url, schema_version


def _response(response_id: str, created_at: float = 1000.0, previous: str | None = None, text: str = "hi") -> dict[str, Any]:
    output = [{"id": f"msg_{response_id}", "type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}]
    return {"id": response_id, "object": "response", "created_at": created_at, "previous_response_id": previous,
            "output": output}


def _item(item_id: str, text: str = "q") -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "user", "status": "completed",
            "content": [{"type": "input_text", "text": text}]}


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return database_url(None, str(tmp_path / "data"))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[ResponseStore]:
    store = ResponseStore(store_url)
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()


async def test_migrate_sets_the_version_once(store: ResponseStore) -> None:
    assert await store.migrate() == SCHEMA_VERSION  # the second start finds the schema current
    async with store.engine.connect() as connection:
        versions = [row[0] for row in await connection.execute(select(schema_version.c.version))]
    assert versions == [SCHEMA_VERSION]


async def test_save_get_items_and_owner(store: ResponseStore) -> None:
    await store.save("alice", _response("resp_1"), [_item("msg_a"), _item("msg_b")])
    assert (await store.get("alice", "resp_1"))["output"][0]["content"][0]["text"] == "hi"
    assert [item["id"] for item in await store.items("alice", "resp_1")] == ["msg_a", "msg_b"]
    assert await store.get("bob", "resp_1") is None  # another key's response does not exist for it
    assert await store.items("bob", "resp_1") is None
    assert await store.conversation("bob", "resp_1") is None
    assert not await store.delete("bob", "resp_1")
    assert await store.get("alice", "resp_1") is not None


async def test_conversation_walks_the_chain_oldest_first(store: ResponseStore) -> None:
    await store.save("alice", _response("resp_1", text="one"), [_item("msg_1")])
    await store.save("alice", _response("resp_2", previous="resp_1", text="two"), [_item("msg_2")])
    await store.save("alice", _response("resp_3", previous="resp_2", text="three"), [_item("msg_3")])
    ids = [item["id"] for item in await store.conversation("alice", "resp_3")]
    assert ids == ["msg_1", "msg_resp_1", "msg_2", "msg_resp_2", "msg_3", "msg_resp_3"]
    assert await store.delete("alice", "resp_2")
    assert await store.conversation("alice", "resp_3") is None  # a broken chain is not a conversation
    assert await store.get("alice", "resp_2") is None
    assert await store.items("alice", "resp_2") is None


async def test_sweep_removes_only_old_responses(store: ResponseStore) -> None:
    await store.save("alice", _response("resp_old", created_at=100.0), [_item("msg_old")])
    await store.save("alice", _response("resp_new", created_at=1000.0), [_item("msg_new")])
    assert await store.sweep(retention_s=500, now=1100.0) == 1
    assert await store.get("alice", "resp_old") is None
    assert await store.get("alice", "resp_new") is not None
    assert await store.sweep(retention_s=500, now=1100.0) == 0


async def test_survives_reopening(store: ResponseStore, store_url: str) -> None:
    await store.save("alice", _response("resp_kept"), [_item("msg_kept")])
    await store.close()
    reopened = ResponseStore(store_url)
    try:
        await reopened.migrate()
        assert (await reopened.get("alice", "resp_kept"))["id"] == "resp_kept"
    finally:
        await reopened.close()


async def test_processes_starting_together_share_one_schema(store_url: str) -> None:
    """Workers migrate the same database at start-up; the one that loses the race finds the schema made."""
    import asyncio

    stores = [ResponseStore(store_url) for _ in range(3)]
    try:
        await asyncio.gather(*(store.migrate() for store in stores))
        async with stores[0].engine.connect() as connection:
            assert [row[0] for row in await connection.execute(select(schema_version.c.version))] == [SCHEMA_VERSION]
    finally:
        for store in stores:
            await store.close()


def test_database_url_forms(tmp_path: Path) -> None:
    assert database_url("postgresql://u:p@h:5/db", "x") == "postgresql+asyncpg://u:p@h:5/db"
    assert database_url("postgres://u@h/db", "x") == "postgresql+asyncpg://u@h/db"
    assert database_url("sqlite+aiosqlite:///a.db", "x") == "sqlite+aiosqlite:///a.db"
    assert database_url(None, str(tmp_path / "d")).endswith("/d/responses.db")
