"""Stored responses and their input items: SQLite (aiosqlite) by default, PostgreSQL (asyncpg) when
GATEWAY_DATABASE_URL names one, through SQLAlchemy's async engine.

The schema is created or migrated at start-up; a one-row table holds its version. Each response belongs to the
name of the API key that created it: for another key it does not exist.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Column, Float, ForeignKey, Integer, MetaData, String, Table, delete, event, select
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

log = logging.getLogger("gateway.responses")

SCHEMA_VERSION = 1
_metadata = MetaData()

# One row (id 1): two processes starting at once cannot both record a version.
schema_version = Table(
    "responses_schema_version",
    _metadata,
    Column("id", Integer, primary_key=True),
    Column("version", Integer, nullable=False),
)
responses = Table(
    "responses",
    _metadata,
    Column("id", String(80), primary_key=True),
    Column("owner", String(160), nullable=False, index=True),
    Column("created_at", Float, nullable=False, index=True),
    Column("previous_response_id", String(80), nullable=True),
    Column("body", JSON, nullable=False),  # the response object as returned
)
input_items = Table(
    "response_input_items",
    _metadata,
    Column("response_id", String(80), ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("item", JSON, nullable=False),
)

# Each migration takes the schema from the version before it to its own; version 1 is the first schema.
_MIGRATIONS: dict[int, Any] = {1: lambda connection: _metadata.create_all(connection)}
# A conversation longer than this (responses chained by previous_response_id) is refused rather than walked.
MAX_CHAIN = 1000


class ChainTooLong(ValueError):
    pass


def database_url(configured: str | None, data_dir: str) -> str:
    """The SQLAlchemy URL: the configured one (a plain postgresql:// URL gets the asyncpg driver) or SQLite in the
    data folder."""
    if configured:
        for plain in ("postgresql://", "postgres://"):
            if configured.startswith(plain):
                return "postgresql+asyncpg://" + configured[len(plain) :]
        return configured
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    return f"sqlite+aiosqlite:///{Path(data_dir) / 'responses.db'}"


class ResponseStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: AsyncEngine = create_async_engine(url)
        if url.startswith("sqlite"):
            @event.listens_for(self.engine.sync_engine, "connect")
            def _sqlite_pragmas(connection: Any, _: Any) -> None:
                cursor = connection.cursor()
                cursor.execute("PRAGMA foreign_keys=ON")  # for ON DELETE CASCADE
                cursor.execute("PRAGMA journal_mode=WAL")  # readers go on while one worker writes
                cursor.execute("PRAGMA busy_timeout=5000")  # several workers share the file
                cursor.close()

    async def migrate(self) -> int:
        """Brings the schema to SCHEMA_VERSION; returns the version found before (0: an empty database). Workers
        starting together race on an empty database: the loser retries and finds the schema made."""
        for attempt in range(5):
            try:
                return await self._migrate()
            except (IntegrityError, OperationalError, ProgrammingError):
                if attempt == 4:
                    raise
                await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    async def _migrate(self) -> int:
        async with self.engine.begin() as connection:
            await connection.run_sync(lambda sync: schema_version.create(sync, checkfirst=True))
            found = (await connection.execute(select(schema_version.c.version))).scalar()
            current = found or 0
            if current > SCHEMA_VERSION:
                raise RuntimeError(f"the responses database has schema version {current}, newer than this gateway's")
            for version in range(current + 1, SCHEMA_VERSION + 1):
                await connection.run_sync(_MIGRATIONS[version])
            if found is None:
                await connection.execute(schema_version.insert().values(id=1, version=SCHEMA_VERSION))
            elif current != SCHEMA_VERSION:
                await connection.execute(schema_version.update().values(version=SCHEMA_VERSION))
            return current

    async def close(self) -> None:
        await self.engine.dispose()

    async def save(self, owner: str, response: dict[str, Any], items: list[dict[str, Any]]) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(
                responses.insert().values(
                    id=response["id"],
                    owner=owner,
                    created_at=float(response["created_at"]),
                    previous_response_id=response.get("previous_response_id"),
                    body=response,
                )
            )
            if items:
                rows = [{"response_id": response["id"], "position": i, "item": item} for i, item in enumerate(items)]
                await connection.execute(input_items.insert(), rows)

    async def get(self, owner: str, response_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as connection:
            query = select(responses.c.body).where(responses.c.id == response_id, responses.c.owner == owner)
            return (await connection.execute(query)).scalar()

    async def items(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The input items of a response, in input order; None when the owner has no such response."""
        async with self.engine.connect() as connection:
            return await self._items(connection, owner, response_id)

    async def _items(self, connection: Any, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        found = await connection.execute(
            select(responses.c.id).where(responses.c.id == response_id, responses.c.owner == owner)
        )
        if found.scalar() is None:
            return None
        query = select(input_items.c.item).where(input_items.c.response_id == response_id).order_by(input_items.c.position)
        return [row[0] for row in await connection.execute(query)]

    async def conversation(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The items of the conversation up to and including `response_id`: each earlier response's input and
        output, oldest first. None when the owner has no such response (or one in its chain is gone)."""
        chain: list[list[dict[str, Any]]] = []
        async with self.engine.connect() as connection:
            current: str | None = response_id
            while current is not None:
                if len(chain) >= MAX_CHAIN:
                    raise ChainTooLong(f"the conversation is longer than {MAX_CHAIN} responses")
                body = (
                    await connection.execute(
                        select(responses.c.body).where(responses.c.id == current, responses.c.owner == owner)
                    )
                ).scalar()
                items = await self._items(connection, owner, current) if body is not None else None
                if body is None or items is None:
                    return None
                chain.append(items + list(body["output"]))
                current = body.get("previous_response_id")
        return [item for turn in reversed(chain) for item in turn]

    async def delete(self, owner: str, response_id: str) -> bool:
        async with self.engine.begin() as connection:
            await connection.execute(delete(input_items).where(
                input_items.c.response_id.in_(
                    select(responses.c.id).where(responses.c.id == response_id, responses.c.owner == owner)
                )
            ))
            result = await connection.execute(
                delete(responses).where(responses.c.id == response_id, responses.c.owner == owner)
            )
            return result.rowcount > 0

    async def sweep(self, retention_s: float, now: float | None = None) -> int:
        """Removes the responses older than `retention_s`; returns how many."""
        cutoff = (time.time() if now is None else now) - retention_s
        old = select(responses.c.id).where(responses.c.created_at < cutoff)
        async with self.engine.begin() as connection:
            await connection.execute(delete(input_items).where(input_items.c.response_id.in_(old)))
            result = await connection.execute(delete(responses).where(responses.c.created_at < cutoff))
            return result.rowcount

    async def sweep_forever(self, retention_s: float, stop: asyncio.Event) -> None:
        """The retention sweep, every tenth of the retention period (at most a minute apart)."""
        period = min(max(retention_s / 10, 1.0), 60.0)
        while not stop.is_set():
            try:
                removed = await self.sweep(retention_s)
                if removed:
                    log.info("removed %d responses older than %.0f s", removed, retention_s)
            except Exception:  # the database may be away for a while: the next sweep tries again
                log.exception("responses retention sweep failed")
            try:
                await asyncio.wait_for(stop.wait(), period)
            except asyncio.TimeoutError:
                pass
