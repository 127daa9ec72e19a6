"""Coalescing: vLLM's own collector merges what the engine produces while a request's response is in flight.

The engine here is vLLM's real `RequestOutputCollector` read as `AsyncLLM.generate` reads it, fed real
`RequestOutput`s; the responses are the backend's real tensors (`ResponseArrays`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import numpy as np
from vllm.logprobs import Logprob
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.output_processor import RequestOutputCollector

from vllm_backend.outputs import OutputOptions, ResponseArrays
from vllm_backend.relay import relay, settler

ALL = {
    "return_finish_reason": True,
    "return_cumulative_logprob": True,
    "return_logprobs": True,
    "return_num_input_tokens": True,
    "return_num_output_tokens": True,
}


def step(*completions: CompletionOutput, finished: bool = False) -> RequestOutput:
    """One engine step's DELTA output, as vLLM's output processor makes it."""
    return RequestOutput("r", "p", [1, 2, 3], None, list(completions), finished)


def token(index: int, text: str, token_id: int, cumulative: float = 0.0, reason: str | None = None):
    """One sequence's new token, with its logprob entry (the sampled token and one alternative)."""
    logprobs = [{token_id: Logprob(cumulative, 1, text), 0: Logprob(-9.0, 2, "?")}]
    return CompletionOutput(index, text, [token_id], cumulative, logprobs, finish_reason=reason)


class Engine:
    """Steps go into vLLM's collector; `generate` reads it the way `AsyncLLM.generate` does."""

    def __init__(self) -> None:
        self.collector = RequestOutputCollector(RequestOutputKind.DELTA, "r")

    async def generate(self):
        finished = False
        while not finished:
            output = self.collector.get_nowait() or await self.collector.get()
            finished = output.finished
            yield output


class SlowSender:
    """Hands responses over only when the test says so, as a busy sender thread would."""

    def __init__(self) -> None:
        self.responses: list[dict[str, np.ndarray]] = []
        self.pending: asyncio.Future | None = None

    def deliver(self, response: dict[str, np.ndarray]) -> asyncio.Future:
        assert self.pending is None or self.pending.done(), "two responses of one request in flight"
        self.responses.append(response)
        self.pending = asyncio.get_running_loop().create_future()
        return self.pending

    def hand_over(self) -> None:
        assert self.pending is not None
        self.pending.set_result(None)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def texts(response: dict[str, np.ndarray]) -> list[str]:
    return [t.decode() for t in response["text_output"]]


async def test_outputs_merge_while_the_response_is_in_flight_and_the_final_one_comes_last() -> None:
    engine, sender = Engine(), SlowSender()
    arrays = ResponseArrays(OutputOptions.from_flags(1, "", ALL))
    task = asyncio.ensure_future(relay(engine.generate(), arrays, sender.deliver))
    engine.collector.put(step(token(0, "A", 10, -0.5)))
    await settle()
    assert [texts(r) for r in sender.responses] == [["A"]]  # the first token never waits
    for text, token_id, cumulative in (("B", 11, -1.0), ("C", 12, -1.5), ("D", 13, -2.5)):
        engine.collector.put(step(token(0, text, token_id, cumulative)))
    await settle()
    assert len(sender.responses) == 1  # nothing pulled while the first response is in flight
    sender.hand_over()
    await settle()
    merged = sender.responses[1]
    assert texts(merged) == ["BCD"]
    assert merged["num_output_tokens"].tolist() == [3]
    assert merged["cumulative_logprob"].tolist() == [-2.5]
    assert merged["finish_reason"].tolist() == [b"None"]
    [entries] = [json.loads(lp) for lp in merged["logprobs"]]
    assert [list(entry)[0] for entry in entries] == ["11", "12", "13"]  # one entry per token, sampled first
    engine.collector.put(step(token(0, "E", 14, -3.0)))
    engine.collector.put(step(token(0, "F", 15, -3.5, "length"), finished=True))
    await settle()
    assert not task.done()  # the final output waits for the response in flight too
    sender.hand_over()
    final = await task
    assert len(sender.responses) == 2  # the final response is the caller's, sent after everything else
    assert texts(final) == ["EF"]
    assert final["finish_reason"].tolist() == [b"length"]
    assert final["num_output_tokens"].tolist() == [2]
    assert len(json.loads(final["logprobs"][0])) == 2


async def test_an_idle_sender_gets_every_token_alone() -> None:
    engine = Engine()
    sent: list[dict[str, np.ndarray]] = []

    async def deliver(response: dict[str, np.ndarray]) -> None:
        sent.append(response)

    task = asyncio.ensure_future(relay(engine.generate(), ResponseArrays(OutputOptions(n=1)), deliver))
    for text in "abc":
        engine.collector.put(step(token(0, text, 1)))
        await settle()
    engine.collector.put(step(token(0, "d", 1, reason="stop"), finished=True))
    final = await task
    assert [texts(r) for r in sent] == [["a"], ["b"], ["c"]]
    assert texts(final) == ["d"]


async def test_n_sequences_merge_by_index_and_sparse_counts_come_with_the_final_response() -> None:
    engine, sender = Engine(), SlowSender()
    sparse = {**ALL, "sparse_outputs": True}
    arrays = ResponseArrays(OutputOptions.from_flags(2, "", sparse))
    task = asyncio.ensure_future(relay(engine.generate(), arrays, sender.deliver))
    # n > 1: vLLM sends each sequence's tokens in outputs of their own, in any order.
    engine.collector.put(step(token(1, "x", 20, -0.1)))
    await settle()
    engine.collector.put(step(token(0, "a", 10, -0.2)))
    engine.collector.put(step(token(1, "y", 21, -0.3, "stop")))  # sequence 1 finishes early
    engine.collector.put(step(token(0, "b", 11, -0.4)))
    await settle()
    sender.hand_over()
    await settle()
    first, merged = sender.responses
    assert texts(first) == ["", "x"] and sorted(first) == ["cumulative_logprob", "logprobs", "text_output"]
    assert texts(merged) == ["ab", "y"]
    assert merged["finish_reason"].tolist() == [b"None", b"stop"]  # a finished sequence says so at once
    assert "num_output_tokens" not in merged  # sparse: counts wait for the final response
    assert merged["cumulative_logprob"].tolist() == np.float32([-0.4, -0.3]).tolist()
    assert [len(json.loads(lp)) for lp in merged["logprobs"]] == [2, 1]
    engine.collector.put(step(token(0, "c", 12, -0.5, "length"), finished=True))
    sender.hand_over()
    final = await task
    assert texts(final) == ["c", ""]
    assert final["finish_reason"].tolist() == [b"length", b"None"]
    assert final["num_input_tokens"].tolist() == [3]
    assert final["num_output_tokens"].tolist() == [3, 2]  # every token not counted before


async def test_outputs_that_end_unfinished_leave_no_final_response() -> None:
    async def outputs():
        yield step(token(0, "a", 1))

    async def deliver(response: Any) -> None:
        return None

    assert await relay(outputs(), ResponseArrays(OutputOptions(n=1)), deliver) is None


async def test_settler_resolves_the_future_from_another_thread_and_tolerates_the_rest() -> None:
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    threading.Thread(target=settler(loop, future)).start()
    assert await asyncio.wait_for(future, timeout=5) is None
    cancelled = loop.create_future()
    cancelled.cancel()
    settler(loop, cancelled)()  # a request cancelled meanwhile
    await settle()
    closed = asyncio.new_event_loop()
    closed.close()
    settler(closed, closed.create_future())()  # an unloaded model's loop: no error
