"""Coalescing: vLLM's own collector merges what the engine produces while a request's response is in flight.

The engine here is vLLM's real `RequestOutputCollector` read as `AsyncLLM.generate` reads it, fed real
`RequestOutput`s; the responses are the backend's real tensors (`ResponseArrays`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Callable

import numpy as np
from vllm.logprobs import Logprob
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.output_processor import RequestOutputCollector

from vllm_backend.outputs import OutputOptions, ResponseArrays
from vllm_backend.relay import MAX_PACE_S, Handover, Pacer, pace_interval, relay

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
        self.on_sent: Callable[[], None] | None = None

    def deliver(self, response: dict[str, np.ndarray], on_sent: Callable[[], None]) -> None:
        assert self.on_sent is None, "two responses of one request in flight"
        self.responses.append(response)
        self.on_sent = on_sent

    def hand_over(self) -> None:
        assert self.on_sent is not None
        on_sent, self.on_sent = self.on_sent, None
        on_sent()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def texts(response: dict[str, np.ndarray]) -> list[str]:
    return [t.decode() for t in response["text_output"]]


async def test_outputs_merge_while_the_response_is_in_flight_and_the_final_one_comes_last() -> None:
    engine, sender = Engine(), SlowSender()
    arrays = ResponseArrays(OutputOptions.from_flags(1, "", ALL, logprobs=1))
    task = asyncio.ensure_future(relay(engine.generate(), arrays, sender.deliver, asyncio.get_running_loop()))
    engine.collector.put(step(token(0, "A", 10, -0.5)))
    await settle()
    assert [texts(r) for r in sender.responses] == [["A"]]  # the first token never waits
    engine.collector.put(step(token(0, "B", 11, -1.0)))  # pulled, then held: "A" is still in flight
    await settle()
    for text, token_id, cumulative in (("C", 12, -1.5), ("D", 13, -2.0), ("E", 14, -2.5)):
        engine.collector.put(step(token(0, text, token_id, cumulative)))  # one engine step each
        await settle()
    assert len(sender.responses) == 1  # nothing more pulled while a response is in flight
    sender.hand_over()
    await settle()
    assert texts(sender.responses[1]) == ["B"]
    sender.hand_over()
    await settle()
    merged = sender.responses[2]  # what the engine produced meanwhile, merged by vLLM's collector
    assert texts(merged) == ["CDE"]
    assert merged["num_output_tokens"].tolist() == [3]
    assert merged["cumulative_logprob"].tolist() == [-2.5]
    assert merged["finish_reason"].tolist() == [b"None"]
    [entries] = [json.loads(lp) for lp in merged["logprobs"]]
    assert [list(entry)[0] for entry in entries] == ["12", "13", "14"]  # one entry per token, sampled first
    engine.collector.put(step(token(0, "F", 15, -3.0)))
    engine.collector.put(step(token(0, "G", 16, -3.5, "length"), finished=True))
    await settle()
    # The final response is the caller's: queued behind the response still in flight, it goes out last.
    final = await task
    assert len(sender.responses) == 3 and sender.on_sent is not None
    assert texts(final) == ["FG"]
    assert final["finish_reason"].tolist() == [b"length"]
    assert final["num_output_tokens"].tolist() == [2]
    assert len(json.loads(final["logprobs"][0])) == 2


async def test_an_idle_sender_gets_every_token_alone() -> None:
    engine = Engine()
    sent: list[dict[str, np.ndarray]] = []

    def deliver(response: dict[str, np.ndarray], on_sent: Callable[[], None]) -> None:
        sent.append(response)
        on_sent()  # handed over before the next token comes

    arrays = ResponseArrays(OutputOptions(n=1))
    task = asyncio.ensure_future(relay(engine.generate(), arrays, deliver, asyncio.get_running_loop()))
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
    arrays = ResponseArrays(OutputOptions.from_flags(2, "", sparse, logprobs=1))
    task = asyncio.ensure_future(relay(engine.generate(), arrays, sender.deliver, asyncio.get_running_loop()))
    # n > 1: vLLM sends each sequence's tokens in outputs of their own, in any order.
    engine.collector.put(step(token(1, "x", 20, -0.1)))
    await settle()
    engine.collector.put(step(token(0, "a", 10, -0.2)))
    engine.collector.put(step(token(1, "y", 21, -0.3, "stop")))  # sequence 1 finishes early
    engine.collector.put(step(token(0, "b", 11, -0.4)))
    await settle()  # the three merged, pulled and held behind the first response
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

    def deliver(response: Any, on_sent: Callable[[], None]) -> None:
        return None

    loop = asyncio.get_running_loop()
    assert await relay(outputs(), ResponseArrays(OutputOptions(n=1)), deliver, loop) is None


async def test_a_handover_wakes_the_waiting_loop_from_the_sender_thread_only_when_it_waits() -> None:
    loop = asyncio.get_running_loop()
    handover = Handover(loop)
    await asyncio.wait_for(handover.wait(), timeout=1)  # nothing in flight
    on_sent = handover.start()
    on_sent()  # sent before anybody waited: no future, no wake-up
    assert handover.waiter is None
    await asyncio.wait_for(handover.wait(), timeout=1)
    on_sent = handover.start()
    waiting = asyncio.ensure_future(handover.wait())
    await settle()
    assert not waiting.done()
    threading.Timer(0.05, on_sent).start()
    await asyncio.wait_for(waiting, timeout=5)
    waiting = asyncio.ensure_future(handover.start() and handover.wait())
    await settle()
    waiting.cancel()  # a request cancelled while it waits: the sender's later mark is harmless
    await settle()
    handover._mark_sent()
    await settle()
    closed = asyncio.new_event_loop()
    closed.close()
    late = Handover(closed)
    late.start()
    late.waiter = closed.create_future()
    late._mark_sent()  # an unloaded model's loop: no error


def _immediate(sent: list[dict[str, np.ndarray]]) -> Callable[[dict[str, np.ndarray], Callable[[], None]], None]:
    def deliver(response: dict[str, np.ndarray], on_sent: Callable[[], None]) -> None:
        sent.append(response)
        on_sent()

    return deliver


async def test_a_busy_server_paces_pulls_so_tokens_merge_between_ticks() -> None:
    loop = asyncio.get_running_loop()
    engine, sent = Engine(), []
    pacer = Pacer(loop, responses_per_s=20, busy_above=0, running=lambda: 1)  # a tick every 50 ms
    arrays = ResponseArrays(OutputOptions(n=1))
    task = asyncio.ensure_future(relay(engine.generate(), arrays, _immediate(sent), loop, pacer.wait))
    engine.collector.put(step(token(0, "a", 1)))
    await settle()
    assert [texts(r) for r in sent] == [["a"]]  # the first token never waits
    for text in "bcd":  # three engine steps within one tick
        engine.collector.put(step(token(0, text, 1)))
        await settle()
    assert len(sent) == 1
    await asyncio.sleep(0.08)
    assert [texts(r) for r in sent] == [["a"], ["bcd"]]
    engine.collector.put(step(token(0, "e", 1, reason="stop"), finished=True))
    assert texts(await task) == ["e"]


async def test_below_the_threshold_nothing_waits_and_one_tick_serves_every_request() -> None:
    loop = asyncio.get_running_loop()
    running = 1
    pacer = Pacer(loop, responses_per_s=40, busy_above=1, running=lambda: running)
    start = loop.time()
    await pacer.wait()
    assert loop.time() - start < 0.01
    running = 2
    waiters = [asyncio.ensure_future(pacer.wait()) for _ in range(3)]
    await settle()
    waiters[0].cancel()  # a cancelled request leaves the others' tick alone
    await asyncio.gather(*waiters[1:])
    assert 0.04 <= loop.time() - start < 0.5
    off = Pacer(loop, 0.0, 0, lambda: 100)  # 0 responses a second: off
    start = loop.time()
    await off.wait()
    assert loop.time() - start < 0.01


def test_the_tick_grows_with_the_running_requests_so_the_response_rate_stays_put() -> None:
    assert pace_interval(32, busy_above=32, responses_per_s=2000) == 0  # at the threshold nothing waits
    assert pace_interval(64, busy_above=32, responses_per_s=2000) == 0.032
    assert pace_interval(256, busy_above=32, responses_per_s=2000) == 0.128  # 256 / 0.128 s = 2,000 a second
    assert pace_interval(100_000, busy_above=32, responses_per_s=2000) == MAX_PACE_S
    assert pace_interval(256, busy_above=32, responses_per_s=0) == 0  # off
