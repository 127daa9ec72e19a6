"""Reading backend streams: several as one (requests with several prompts), and what arrived together as one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

from gateway.core.coalesce import merge_chunks
from gateway.core.upstream import GenerateChunk

T = TypeVar("T")
_END = object()
SIBLINGS_GRACE_S = 2.0  # how long the streams beside a failed one may take to end by themselves


async def merge(streams: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Items of every stream as they arrive, tagged with their stream's position.

    The first error ends the merge, and the streams still running are cancelled unless they end within
    SIBLINGS_GRACE_S; closing it otherwise (the client left) cancels them at once.
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
    failed = False
    try:
        running = len(tasks)
        while running:
            position, item, error = await queue.get()
            if error is not None:
                failed = True
                raise error
            if item is _END:
                running -= 1
                continue
            yield position, item  # type: ignore[misc]
    finally:
        if failed:  # the caller has its error now; the siblings get a moment to end by themselves
            _finish_later(tasks)
        else:
            await _cancel(tasks)


async def _cancel(tasks: list[asyncio.Future]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# The siblings of a failed stream, ending in the background (held here so that they are not collected).
_ENDING: set[asyncio.Task] = set()


def _finish_later(tasks: list[asyncio.Future]) -> None:
    """Lets the streams beside one that failed run for up to SIBLINGS_GRACE_S, then cancels what is left.

    Siblings mostly fail together (the same bad parameter for every prompt), their errors already on the way.
    Cancelling their calls at that moment, while Triton writes those responses, deadlocks Triton 2.51's gRPC
    frontend (the local stack's; docs/local-stack.md): its stream handler then waits on a lock that the
    response's writer holds, and the server answers no stream again. Left to end, they need no cancel."""

    async def finish() -> None:
        await asyncio.wait(tasks, timeout=SIBLINGS_GRACE_S)
        await _cancel(tasks)

    ending = asyncio.ensure_future(finish())
    _ENDING.add(ending)
    ending.add_done_callback(_ENDING.discard)


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
