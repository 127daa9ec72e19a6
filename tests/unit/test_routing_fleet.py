"""The fleet's retry before the first byte and its choice of replicas, with fake replicas (pure logic: the real
gRPC path runs in tests/e2e/test_fleet.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from gateway.core.upstream import GenerateChunk, GenerateRequest, TokenizerAnswer, TokenizerCall
from gateway.model_map import ModelEntry
from gateway.resilience.breaker import BreakerBoard
from gateway.routing.fleet import Fleet, FleetConfig, _turned_unhealthy
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.upstreams import ModelLoad, ReplicaLoad, UpstreamEntries
from gateway.triton_client import UpstreamError, stream_error


class FakeReplica:
    def __init__(self, url: str, behaviour: str) -> None:
        self.url = url
        self.behaviour = behaviour  # "ok", "unavailable", "unavailable_mid", "bad_request", "model_gone"
        self.breakers = BreakerBoard(0, 0)
        self.calls = 0
        self.health_timeout_s = 1.0
        self.max_model_len = 2048
        self.tokenize_calls: list[TokenizerCall] = []
        self.index_calls = 0

    async def repository_index(self) -> list[ModelEntry]:
        self.index_calls += 1
        if self.behaviour == "model_gone" and self.calls:  # what it says once its drain has begun
            return [ModelEntry("m", "1", "UNAVAILABLE")]
        return [ModelEntry("m", "1", "READY")]

    async def server_ready(self) -> bool:
        return True

    async def close(self) -> None:
        pass

    def cut_streams(self, error: object) -> int:
        return 0

    async def tokenize_only(self, call: TokenizerCall, timeout_s: float) -> TokenizerAnswer:
        self.tokenize_calls.append(call)
        if self.behaviour == "unavailable":
            raise UpstreamError(503, "Triton is unavailable", retryable=True)
        return TokenizerAnswer(self.url, [1], self.max_model_len)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        self.calls += 1
        if self.behaviour == "unavailable":
            raise UpstreamError(503, "Triton is unavailable", retryable=True)
        if self.behaviour == "bad_request":
            raise UpstreamError(400, "prompt too long")
        if self.behaviour == "model_gone":
            raise stream_error("Request for unknown model: 'm' has no available versions")
        yield GenerateChunk([self.url])
        if self.behaviour == "unavailable_mid":
            raise UpstreamError(503, "Triton is unavailable", retryable=True)
        yield GenerateChunk(["!"], final=True)


async def _fleet(behaviours: dict[str, str], **config: object) -> tuple[Fleet, dict[str, FakeReplica]]:
    fakes = {url: FakeReplica(url, b) for url, b in behaviours.items()}
    entries = UpstreamEntries(tuple(fakes))
    fleet = Fleet(entries, {u: f"http://{u}/metrics" for u in fakes}, fakes.__getitem__,  # type: ignore[arg-type]
                  FleetConfig(**config), RoutingMetrics(CollectorRegistry()))  # type: ignore[arg-type]
    await fleet.refresh()
    return fleet, fakes


async def _texts(fleet: Fleet) -> list[str]:
    request = GenerateRequest("m", "id", {}, True, text_input="hi")
    return [text async for chunk in fleet.generate(request) for text in chunk.texts]


def test_a_replica_failing_before_the_first_byte_is_retried_elsewhere() -> None:
    async def scenario() -> None:
        fleet, fakes = await _fleet({"a:1": "unavailable", "b:1": "ok"}, policy="round_robin")
        for _ in range(4):
            assert await _texts(fleet) == ["b:1", "!"]
        assert fakes["a:1"].calls == 2  # picked in turn, retried on b each time
        await fleet.close()

    asyncio.run(scenario())


def test_a_replica_that_lost_the_model_is_retried_elsewhere_and_rechecked_at_once() -> None:
    """A drain unloads every model before the replica's next model-map refresh would show it."""

    async def scenario() -> None:
        fleet, fakes = await _fleet({"a:1": "model_gone", "b:1": "ok"}, policy="round_robin", model_refresh_s=60)
        indexed = fakes["a:1"].index_calls
        assert await _texts(fleet) == ["b:1", "!"]  # a's turn, retried on b
        await asyncio.sleep(0.05)  # the recheck runs beside the requests
        for _ in range(3):
            assert await _texts(fleet) == ["b:1", "!"]
        assert fakes["a:1"].calls == 1  # its map was refreshed after the first: it was not picked again
        assert fakes["a:1"].index_calls == indexed + 1
        await fleet.close()

    asyncio.run(scenario())


def test_retries_stop_at_the_limit_and_the_error_comes_through() -> None:
    async def scenario() -> None:
        fleet, fakes = await _fleet({"a:1": "unavailable", "b:1": "unavailable", "c:1": "unavailable"}, retries=1)
        with pytest.raises(UpstreamError) as caught:
            await _texts(fleet)
        assert caught.value.status == 503
        assert sum(f.calls for f in fakes.values()) == 2
        await fleet.close()

    asyncio.run(scenario())


def test_errors_of_the_request_and_errors_after_the_first_byte_are_not_retried() -> None:
    async def scenario() -> None:
        fleet, fakes = await _fleet({"a:1": "bad_request", "b:1": "bad_request"})
        with pytest.raises(UpstreamError):
            await _texts(fleet)
        assert sum(f.calls for f in fakes.values()) == 1
        fleet, fakes = await _fleet({"a:1": "unavailable_mid", "b:1": "unavailable_mid"})
        got: list[str] = []
        with pytest.raises(UpstreamError):
            async for chunk in fleet.generate(GenerateRequest("m", "id", {}, True, text_input="hi")):
                got += chunk.texts
        assert len(got) == 1 and sum(f.calls for f in fakes.values()) == 1
        await fleet.close()

    asyncio.run(scenario())


def test_in_flight_counts_return_to_zero() -> None:
    async def scenario() -> None:
        fleet, _ = await _fleet({"a:1": "ok", "b:1": "unavailable"})
        for _ in range(6):
            await _texts(fleet)
        assert [r.in_flight for r in fleet.replicas.values()] == [0, 0]
        await fleet.close()

    asyncio.run(scenario())


def test_tokenize_calls_are_retried_on_another_replica_like_generations() -> None:
    async def scenario() -> None:
        fleet, fakes = await _fleet({"a:1": "unavailable", "b:1": "ok"}, policy="round_robin")
        user_calls = lambda fake: [c for c in fake.tokenize_calls if c.request_id == "id"]  # noqa: E731
        for _ in range(2):
            assert (await fleet.tokenize_only(TokenizerCall("m", "id", text_input="hi"))).text == "b:1"
        assert len(user_calls(fakes["a:1"])) == 1 and len(user_calls(fakes["b:1"])) == 2
        await fleet.close()

    asyncio.run(scenario())


def test_the_merged_index_carries_a_context_length_from_a_replica_that_told_it() -> None:
    async def scenario() -> None:
        fleet, fakes = await _fleet({"a:1": "unavailable", "b:1": "ok"})
        assert [(e.name, e.max_model_len) for e in await fleet.refresh()] == [("m", 2048)]
        probe = next(c for c in fakes["b:1"].tokenize_calls)
        assert (probe.model, probe.model_version, probe.text_input) == ("m", "1", "")
        await fleet.close()

    asyncio.run(scenario())


def _chat(system: str, *turns: str) -> GenerateRequest:
    messages = [{"role": "system", "content": system}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return GenerateRequest("m", "id", {}, True, messages=messages)


async def _served_by(fleet: Fleet, request: GenerateRequest) -> str:
    texts = [text async for chunk in fleet.generate(request) for text in chunk.texts]
    return texts[0]


def test_prefix_sends_a_conversation_where_its_earlier_turns_went() -> None:
    async def scenario() -> None:
        fleet, _ = await _fleet({"a:1": "ok", "b:1": "ok"}, policy="prefix")
        system = "You answer in French. " * 30
        history = ["Hello, who are you? " * 20]
        first = await _served_by(fleet, _chat(system, *history))
        for turn in range(4):
            history += [f"Reply {turn}. " * 20, f"Question {turn}? " * 20]
            assert await _served_by(fleet, _chat(system, *history)) == first
        assert fleet.index.matched(fleet.prefix_blocks(_chat(system, *history)), first) > 0
        await fleet.close()

    asyncio.run(scenario())


def test_prefix_records_the_replica_a_request_was_retried_on_and_forgets_the_one_that_failed() -> None:
    async def scenario() -> None:
        fleet, fakes = await _fleet({"a:1": "ok", "b:1": "ok"}, policy="prefix")
        request = _chat("Be brief. " * 60, "What is a prefix cache? " * 20)
        blocks = fleet.prefix_blocks(request)
        home = await _served_by(fleet, request)
        other = next(url for url in fakes if url != home)
        assert fleet.index.matched(blocks, home) == len(blocks) and fleet.index.matched(blocks, other) == 0
        fakes[home].behaviour = "unavailable"  # it restarted: it fails before the first byte
        assert await _served_by(fleet, request) == other
        assert fleet.index.matched(blocks, home) == 0 and fleet.index.matched(blocks, other) == len(blocks)
        await fleet.close()

    asyncio.run(scenario())


def test_prefix_forgets_a_replica_that_became_unreachable() -> None:
    async def scenario() -> None:
        fleet, fakes = await _fleet({"a:1": "ok", "b:1": "ok"}, policy="prefix")
        request = _chat("Be brief. " * 60, "Hi " * 100)
        home = await _served_by(fleet, request)

        async def unreachable() -> list[ModelEntry]:
            raise UpstreamError(503, "Triton is unavailable", retryable=True)

        fakes[home].repository_index = unreachable  # type: ignore[method-assign]
        with pytest.raises(UpstreamError):
            await fleet._index(fleet.replicas[home])
        assert fleet.index.matched(fleet.prefix_blocks(request), home) == 0
        await fleet.close()

    asyncio.run(scenario())


def test_other_policies_keep_no_index() -> None:
    async def scenario() -> None:
        fleet, _ = await _fleet({"a:1": "ok", "b:1": "ok"}, policy="least_load")
        await _served_by(fleet, _chat("Be brief. " * 60, "Hi " * 100))
        assert len(fleet.index) == 0
        await fleet.close()

    asyncio.run(scenario())


def test_an_engine_turning_unhealthy_is_a_restart_to_the_index() -> None:
    healthy, sick = ReplicaLoad({"m": ModelLoad()}), ReplicaLoad({"m": ModelLoad(healthy=False)})
    assert _turned_unhealthy(healthy, sick) and _turned_unhealthy(ReplicaLoad(), sick)
    assert not _turned_unhealthy(sick, sick) and not _turned_unhealthy(sick, healthy)


@pytest.mark.parametrize(
    ("message", "retryable"),
    [
        ("Server is stopping, scheduler for model has stopped accepting new inference requests", True),
        ("[vllm] the engine is unhealthy", True),
        ("Request for unknown model: 'm' has no available versions", True),
        ("invalid request: max_tokens must be at least 1", False),
        ("the engine raised: boom", False),
    ],
)
def test_stream_errors_of_a_replica_that_cannot_take_a_request_may_go_elsewhere(message: str, retryable: bool) -> None:
    """A Triton draining after SIGTERM refuses requests sent before the gateway saw it unready: another replica
    takes them (a client got a 502 for one in the fleet test's drain)."""
    assert stream_error(message).retryable is retryable
