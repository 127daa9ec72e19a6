"""Merging the backend responses that arrived together, and reading ahead of a busy consumer."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.core.choices import ChoiceAccumulator
from gateway.core.coalesce import merge_chunks
from gateway.core.upstream import GenerateChunk
from gateway.streams import coalesced, read_ahead


def _entry(token_id: int, text: str) -> dict:
    return {str(token_id): {"logprob": -0.5, "rank": 1, "decoded_token": text}}


def test_texts_counts_logprobs_and_finish_merge_in_order() -> None:
    chunks = [
        GenerateChunk(["a", "x"], request_id="r", logprobs=[json.dumps([_entry(1, "a")]), "null"]),
        GenerateChunk(["b", ""], ["None", "stop"], logprobs=[json.dumps([_entry(2, "b")]), "null"]),
        GenerateChunk(["c", ""], ["length", "stop"], 7, [3, 1], final=True, logprobs=[json.dumps([_entry(3, "c")]), "[]"]),
    ]
    merged = merge_chunks(chunks)
    assert merged.texts == ["abc", "x"]
    assert merged.finish_reasons == ["length", "stop"]
    assert merged.num_input_tokens == 7
    assert merged.num_output_tokens == [3, 1]
    assert merged.final and merged.request_id == "r"
    assert [list(e)[0] for e in json.loads(merged.logprobs[0])] == ["1", "2", "3"]
    assert merged.logprobs[1] in ("null", "[]")


def test_a_finish_reason_is_not_undone_by_a_later_running_marker() -> None:
    merged = merge_chunks([GenerateChunk(["a"], ["stop"]), GenerateChunk([""], ["None"])])
    assert merged.finish_reasons == ["stop"]


def test_accumulating_merged_chunks_equals_accumulating_them_one_by_one() -> None:
    chunks = [GenerateChunk([w], num_output_tokens=[1]) for w in ("one ", "two ", "three")]
    chunks.append(GenerateChunk([], [], 4, [], final=True))
    one_by_one, merged = ChoiceAccumulator(1), ChoiceAccumulator(1)
    for chunk in chunks:
        one_by_one.add(chunk)
    merged.add(merge_chunks(chunks[:2]))
    merged.add(merge_chunks(chunks[2:]))
    assert merged.texts == one_by_one.texts == ["one two three"]
    assert merged.completion_tokens == one_by_one.completion_tokens == 3
    assert merged.prompt_tokens == one_by_one.prompt_tokens == 4


async def _items(count: int, gap_s: float, fail: bool = False):
    for i in range(count):
        if gap_s:
            await asyncio.sleep(gap_s)
        yield i
    if fail:
        raise ValueError("upstream broke")


async def test_an_idle_consumer_gets_each_item_as_it_comes() -> None:
    batches = [batch async for batch in read_ahead(_items(5, 0.005))]
    assert batches == [[0], [1], [2], [3], [4]]


async def test_a_busy_consumer_gets_what_piled_up_at_once() -> None:
    batches = []
    async for batch in read_ahead(_items(20, 0.001)):
        batches.append(batch)
        await asyncio.sleep(0.02)  # the writer is slow
    assert [i for batch in batches for i in batch] == list(range(20))
    assert len(batches) < 20


async def test_an_error_comes_after_the_items_before_it() -> None:
    seen = []
    with pytest.raises(ValueError, match="upstream broke"):
        async for batch in read_ahead(_items(3, 0, fail=True)):
            seen += batch
    assert seen == [0, 1, 2]


async def test_closing_early_closes_the_upstream() -> None:
    closed = asyncio.Event()

    async def endless():
        try:
            while True:
                await asyncio.sleep(0.001)
                yield GenerateChunk(["w"])
        finally:
            closed.set()

    stream = coalesced(endless())
    assert (await anext(stream)).texts[0].startswith("w")
    await stream.aclose()
    assert closed.is_set()
