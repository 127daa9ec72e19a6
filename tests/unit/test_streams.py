from __future__ import annotations

import asyncio
import time

import pytest

from gateway import streams
from gateway.streams import merge


async def _numbers(values: list[int], delay: float, fail: bool = False):
    for value in values:
        await asyncio.sleep(delay)
        yield value
    if fail:
        raise ValueError("broken")


async def test_merge_interleaves_and_tags_items() -> None:
    items = [item async for item in merge([_numbers([1, 2], 0.01), _numbers([10, 20, 30], 0.004)])]
    assert sorted(items) == [(0, 1), (0, 2), (1, 10), (1, 20), (1, 30)]
    assert items[0] == (1, 10)


async def test_merge_raises_the_first_error_at_once_and_cancels_the_rest_after_a_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "SIBLINGS_GRACE_S", 0.2)
    cancelled = asyncio.Event()
    ended: list[str] = []

    async def endless():
        try:
            while True:
                await asyncio.sleep(0.01)
                yield 0
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def short():
        await asyncio.sleep(0.05)
        yield 1
        ended.append("short")

    started = time.monotonic()
    with pytest.raises(ValueError, match="broken"):
        async for _ in merge([_numbers([1], 0.001, fail=True), endless(), short()]):
            pass
    assert time.monotonic() - started < 0.15  # the caller is not kept waiting for the siblings
    assert not cancelled.is_set()
    await asyncio.wait_for(cancelled.wait(), 2)  # the endless one, once the grace is over
    assert ended == ["short"]  # the one that ended within the grace ran to its end, uncancelled


@pytest.mark.parametrize("count", [1, 2])
async def test_closing_the_merge_closes_every_stream_at_once(count: int) -> None:
    """A client that leaves closes the merge: each backend stream must close then (cancelling its Triton
    request), not whenever the garbage collector finalizes it."""
    closed: list[int] = []

    async def endless(position: int):
        try:
            while True:
                await asyncio.sleep(0)
                yield position
        finally:
            closed.append(position)

    streams = [endless(position) for position in range(count)]  # held here, as a reference cycle would
    merged = merge(streams)
    await anext(merged)
    await merged.aclose()
    assert sorted(closed) == list(range(count))
