"""A reader that goes away cancels the gRPC call, never the task inside grpc.aio's read() (that leaks memory)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.triton_client import _read_uncancelled


class FakeCall:
    """Stands in for a grpc.aio call: read() waits for a message; cancel() ends the pending read."""

    def __init__(self) -> None:
        self.messages: asyncio.Queue[object] = asyncio.Queue()
        self.cancelled = False
        self.read_was_interrupted = False

    async def read(self) -> object:
        try:
            return await self.messages.get()
        except asyncio.CancelledError:
            if not self.cancelled:
                self.read_was_interrupted = True  # what leaks in grpcio: a task cancelled inside read()
            raise

    def cancel(self) -> bool:
        self.cancelled = True
        self.messages.put_nowait(None)  # the real call's read then ends with the call's cancellation
        return True


def test_messages_come_through() -> None:
    async def scenario() -> object:
        call = FakeCall()
        call.messages.put_nowait("first")
        return await _read_uncancelled(call)

    assert asyncio.run(scenario()) == "first"


def test_cancelling_the_reader_cancels_the_call_not_the_read() -> None:
    async def scenario() -> FakeCall:
        call = FakeCall()
        reader = asyncio.ensure_future(_read_uncancelled(call))
        await asyncio.sleep(0)  # the read is pending
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        await asyncio.sleep(0.01)  # the read task ends on the call's cancellation
        return call

    call = asyncio.run(scenario())
    assert call.cancelled and not call.read_was_interrupted
