"""Several backend streams read as one, for requests with several prompts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")
_END = object()


async def merge(streams: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Items of every stream as they arrive, tagged with their stream's position.

    The first error ends the merge; closing it cancels every stream still running.
    """
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue[tuple[int, object, BaseException | None]] = asyncio.Queue()

    async def pump(position: int, stream: AsyncIterator[T]) -> None:
        try:
            async for item in stream:
                await queue.put((position, item, None))
        except Exception as exc:
            await queue.put((position, None, exc))
            return
        await queue.put((position, _END, None))

    tasks = [asyncio.ensure_future(pump(position, stream)) for position, stream in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            position, item, error = await queue.get()
            if error is not None:
                raise error
            if item is _END:
                running -= 1
                continue
            yield position, item  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
