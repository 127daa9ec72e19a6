"""The responses store's suite (tests/unit/test_responses_store.py) on a real PostgreSQL server, started here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.responses.store import _metadata, database_url, schema_version
from tests.postgres_server import postgres_server
from tests.unit.test_responses_store import (  # noqa: F401 (collected here again, on PostgreSQL)
    store,
    test_conversation_walks_the_chain_oldest_first,
    test_migrate_sets_the_version_once,
    test_processes_starting_together_share_one_schema,
    test_save_get_items_and_owner,
    test_survives_reopening,
    test_sweep_removes_only_old_responses,
)


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture
async def store_url(postgres_url: str) -> AsyncIterator[str]:
    """The server's database, emptied after each test."""
    url = database_url(postgres_url, "unused")
    yield url
    engine = create_async_engine(url)
    async with engine.begin() as connection:
        await connection.run_sync(_metadata.drop_all)
    await engine.dispose()


def test_the_url_names_asyncpg(store_url: str) -> None:
    assert store_url.startswith("postgresql+asyncpg://")
    assert schema_version.name == "responses_schema_version"
