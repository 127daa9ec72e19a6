"""Reading backend streams: several as one (requests with several prompts), and what arrived together as one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

from gateway.core.coalesce import merge_chunks
from gateway.core.upstream import GenerateChunk

T = TypeVar("T")
_END = object()


async def merge(streams: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Items of every stream as they arrive, tagged with their stream's position.

    The first error ends the merge; closing it cancels every stream still running.
    """
    if len(streams) == 1:
        try:
            async for item in streams[0]:
                yield 0, item
        finally:  # now, not when collected (`async for` leaves it open): that cancels its Triton request
            await streams[0].aclose()  # type: ignore[attr-defined]
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


async def read_ahead(stream: AsyncIterator[T]) -> AsyncIterator[list[T]]:
    """The items of `stream` in arrival order, as lists of every item that arrived while the consumer
    was busy. A task of its own reads the stream, so an idle consumer gets each item as it comes and a
    busy one gets what piled up at once. An error comes after the items before it; closing the lists
    closes the stream."""
    loop = asyncio.get_running_loop()
    arrived: list[T] = []
    wake: asyncio.Future[None] | None = None
    ended: list[BaseException | None] = []  # one entry once the stream has ended: its error, or None

    def notify() -> None:
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def pump() -> None:
        try:
            async for item in stream:
                arrived.append(item)
                notify()
            ended.append(None)
        except Exception as exc:
            ended.append(exc)
        notify()

    reader = loop.create_task(pump())
    try:
        while True:
            if not arrived and not ended:
                wake = loop.create_future()
                await wake
                wake = None
            if arrived:
                batch = arrived[:]
                arrived.clear()
                yield batch
            elif ended:
                if ended[0] is not None:
                    raise ended[0]
                return
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def coalesced(stream: AsyncIterator[GenerateChunk]) -> AsyncIterator[GenerateChunk]:
    """A stream's backend responses, those that arrived together merged into one."""
    batches = read_ahead(stream)
    try:
        async for batch in batches:
            yield merge_chunks(batch)
    finally:
        await batches.aclose()
