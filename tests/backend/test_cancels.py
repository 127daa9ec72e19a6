from __future__ import annotations

import asyncio

from vllm_backend.cancels import ABORTED, CancelWatch, Running, cancelled


class Request:
    """A response sender's cancellation question, counted (each one is a round trip to Triton)."""

    def __init__(self, cancelled: bool = False, broken: bool = False) -> None:
        self.cancelled, self.broken, self.asked, self.aborted = cancelled, broken, 0, 0

    def is_cancelled(self) -> bool:
        self.asked += 1
        if self.broken:
            raise RuntimeError("unknown request")
        return self.cancelled

    async def abort(self) -> None:
        self.aborted += 1


def test_cancelled_names_the_cancelled_and_the_requests_triton_no_longer_knows() -> None:
    running = {name: Request(c, b) for name, c, b in (("a", False, False), ("b", True, False), ("c", False, True))}
    entries = {name: Running(r.is_cancelled, r.abort) for name, r in running.items()}
    assert cancelled(entries) == ["b", "c"]
    assert [r.asked for r in running.values()] == [1, 1, 1]


async def test_a_pass_asks_each_request_once_and_aborts_a_cancelled_one_once() -> None:
    errors: list[str] = []
    infos: list[str] = []
    watch = CancelWatch(0.5, errors.append, infos.append)
    alive, gone = Request(), Request(cancelled=True)
    watch.add("alive", alive.is_cancelled, alive.abort)
    watch.add("gone", gone.is_cancelled, gone.abort)
    await watch.abort_cancelled()
    await watch.abort_cancelled()
    assert (alive.asked, alive.aborted) == (2, 0)
    assert (gone.asked, gone.aborted) == (1, 1)  # aborted, then no longer asked
    assert list(watch.running) == ["alive"] and errors == []
    assert infos == [f"[vllm] request gone {ABORTED}"]  # once it is aborted: what tests wait for


async def test_a_failed_abort_is_reported_and_the_pass_goes_on() -> None:
    errors: list[str] = []
    infos: list[str] = []
    watch = CancelWatch(0.5, errors.append, infos.append)
    second = Request(cancelled=True)

    async def dead_engine() -> None:
        raise RuntimeError("engine dead")

    watch.add("first", lambda: True, dead_engine)
    watch.add("second", second.is_cancelled, second.abort)
    await watch.abort_cancelled()
    assert errors == ["[vllm] could not abort request first: RuntimeError('engine dead')"]
    assert second.aborted == 1
    assert infos == [f"[vllm] request second {ABORTED}"]  # not the one that failed


async def test_the_watch_aborts_within_the_interval_and_forgets_ended_requests() -> None:
    watch = CancelWatch(0.05, lambda message: None)
    request, ended = Request(), Request()
    watch.add("r", request.is_cancelled, request.abort)
    watch.add("ended", ended.is_cancelled, ended.abort)
    watch.discard("ended")
    task = asyncio.ensure_future(watch.run())
    try:
        await asyncio.sleep(0.12)
        request.cancelled = True
        await asyncio.sleep(0.08)
        assert request.aborted == 1
        assert ended.asked == 0
    finally:
        task.cancel()
