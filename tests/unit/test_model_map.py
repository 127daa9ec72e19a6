"""The model map: requests read it from memory; refreshes are shared and never pile up on Triton."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import OpenAIError
from gateway.model_map import ContextLengths, ModelEntry, ModelMap


class SlowIndex:
    """A repository index that answers after `delay_s`, counting its calls."""

    def __init__(self, entries: list[ModelEntry], delay_s: float = 0.05) -> None:
        self.entries = entries
        self.delay_s = delay_s
        self.calls = 0
        self.fail = False

    async def __call__(self) -> list[ModelEntry]:
        self.calls += 1
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise OpenAIError(503, "Triton is unavailable")
        return list(self.entries)


READY = ModelEntry("m", "1", "READY")


async def test_a_known_model_is_served_from_memory() -> None:
    index = SlowIndex([READY])
    models = ModelMap(index, refresh_s=60)
    await models.refresh()
    results = await asyncio.gather(*(models.is_served("m") for _ in range(256)))
    assert all(results)
    assert index.calls == 1


async def test_waiting_requests_share_one_refresh() -> None:
    index = SlowIndex([READY, ModelEntry("loading", "1", "LOADING")])
    models = ModelMap(index, refresh_s=60)
    results = await asyncio.gather(*(models.is_served(name) for name in ["m", "loading", "nope"] * 100))
    assert results == [True, False, False] * 100
    assert index.calls == 1


async def test_a_failed_refresh_keeps_the_last_map_and_reaches_every_waiter() -> None:
    index = SlowIndex([READY])
    models = ModelMap(index, refresh_s=60)
    await models.refresh()
    index.fail = True
    outcomes = await asyncio.gather(*(models.is_served("new") for _ in range(10)), return_exceptions=True)
    assert all(isinstance(o, OpenAIError) and o.status == 503 for o in outcomes)
    assert index.calls == 2
    assert await models.is_served("m")


async def test_a_caller_giving_up_does_not_cancel_the_shared_refresh() -> None:
    index = SlowIndex([READY], delay_s=0.1)
    models = ModelMap(index, refresh_s=60)
    impatient = asyncio.ensure_future(models.is_served("m"))
    patient = asyncio.ensure_future(models.is_served("m"))
    await asyncio.sleep(0.01)
    impatient.cancel()
    assert await patient
    with pytest.raises(asyncio.CancelledError):
        await impatient


async def test_the_background_refresh_follows_triton_and_stops() -> None:
    index = SlowIndex([], delay_s=0)
    models = ModelMap(index, refresh_s=0.02)
    models.start()
    await asyncio.sleep(0.05)
    index.entries = [READY]
    await asyncio.sleep(0.06)
    assert models.ready == frozenset({"m"})
    await models.stop()
    calls = index.calls
    await asyncio.sleep(0.05)
    assert index.calls == calls


class Backend:
    """Answers max_model_len questions with `answers[name]` (an int, or an error to raise), counting them."""

    def __init__(self, answers: dict[str, int | OpenAIError]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, str]] = []

    async def __call__(self, name: str, version: str) -> int:
        self.asked.append((name, version))
        answer = self.answers[name]
        if isinstance(answer, OpenAIError):
            raise answer
        return answer


async def test_context_lengths_are_asked_once_per_ready_version() -> None:
    backend = Backend({"m": 2048, "loading": 1})
    lengths = ContextLengths(backend)
    entries = [READY, ModelEntry("loading", "1", "LOADING")]
    for _ in range(3):
        annotated = await lengths.annotate(entries)
    assert [e.max_model_len for e in annotated] == [2048, None]
    assert backend.asked == [("m", "1")]
    await lengths.annotate([ModelEntry("m", "1", "UNAVAILABLE")])  # unloaded: asked again once back
    backend.answers["m"] = 4096
    assert (await lengths.annotate([READY]))[0].max_model_len == 4096
    assert backend.asked == [("m", "1"), ("m", "1")]


async def test_unavailable_backends_are_asked_again_and_refusing_ones_are_not() -> None:
    backend = Backend({"down": OpenAIError(503, "unavailable"), "old": OpenAIError(400, "unexpected input")})
    lengths = ContextLengths(backend)
    entries = [ModelEntry("down", "1", "READY"), ModelEntry("old", "1", "READY")]
    for _ in range(2):
        assert [e.max_model_len for e in await lengths.annotate(entries)] == [None, None]
    assert backend.asked.count(("down", "1")) == 2 and backend.asked.count(("old", "1")) == 1
    backend.answers["down"] = 512
    assert (await lengths.annotate(entries))[0].max_model_len == 512
