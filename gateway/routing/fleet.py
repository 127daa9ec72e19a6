"""The Triton replicas behind the gateway: one channel, model map and load snapshot per replica, the picker's
choice per request, and a retry on another replica before the first byte.

`Fleet.generate` has the Triton client's interface, so the routers do not know how many replicas there are; one
replica (`GATEWAY_TRITON_GRPC_URL`) is the same code with a list of one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial

import httpx

from gateway.core.upstream import GenerateChunk, GenerateRequest, TokenizerAnswer, TokenizerCall
from gateway.errors import OpenAIError
from gateway.model_map import ContextLengths, ModelEntry, ModelMap
from gateway.observability.federation import parse_families
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.picker import Policy, PrefixWeights, ReplicaView, pick
from gateway.routing.prefix_index import PrefixIndex, block_hashes
from gateway.routing.readiness import ReplicaState
from gateway.routing.upstreams import ReplicaLoad, UpstreamEntries, grpc_target, load_from_families, metrics_url_for
from gateway.triton_client import TritonClient, UpstreamError

log = logging.getLogger("gateway.routing")

MakeClient = Callable[[str], TritonClient]


def prompt_of(request: GenerateRequest) -> str:
    """The text whose beginning decides prefix affinity: the prompt, or the chat messages in order (the chat
    template is applied by the backend; any rendering of the messages in order shares a prefix exactly when the
    rendered prompts do)."""
    if request.text_input is not None:
        return request.text_input
    if request.messages is not None:
        return "".join(
            f"{m.get('role', '')}\x1f{c if isinstance(c := m.get('content'), str) else str(c or '')}\x1e"
            for m in request.messages
        )
    if request.prompt_token_ids is not None:
        return " ".join(map(str, request.prompt_token_ids))
    return ""


async def _ask_context_length(client: TritonClient, model: str, version: str) -> int:
    """A model version's max_model_len, from its backend's answer to tokenizing nothing."""
    call = TokenizerCall(model, f"max-model-len-{model}", text_input="", model_version=version)
    return (await client.tokenize_only(call, client.health_timeout_s)).max_model_len


def _describes_better(entry: ModelEntry, known: ModelEntry | None) -> bool:
    """Whether a replica's entry for a model beats another replica's: READY wins, then a known context length."""
    if known is None:
        return True
    return entry.state == "READY" and (known.state != "READY" or known.max_model_len is None)


def _turned_unhealthy(before: ReplicaLoad, after: ReplicaLoad) -> bool:
    """Whether an engine that was healthy (or not reported) is reported unhealthy now."""
    for model, now in after.by_model.items():
        was = before.by_model.get(model)
        if not now.healthy and (was is None or was.healthy):
            return True
    return False


@dataclass
class Replica:
    url: str
    metrics_url: str
    client: TritonClient
    models: ModelMap
    context_lengths: ContextLengths
    in_flight: int = 0
    load: ReplicaLoad = field(default_factory=ReplicaLoad)
    reachable: bool = True  # its last model-index refresh answered
    server_ready: bool = True  # Triton says it is ready (false while it drains)
    removed: bool = False  # gone from DNS: no new requests, closed once its streams end

    def open_to(self, model: str) -> bool:
        """Whether a new request for `model` may go here."""
        if self.removed or not (self.reachable and self.server_ready) or model not in self.models.ready:
            return False
        gauges = self.load.by_model.get(model)
        if gauges is not None and not gauges.healthy:
            return False
        return not (self.client.breakers.enabled and self.client.breakers.for_model(model).is_open())

    def view(self, model: str, matched: int = 0) -> ReplicaView:
        gauges = self.load.by_model.get(model)
        if gauges is None:
            return ReplicaView(self.url, self.in_flight, matched=matched)
        return ReplicaView(self.url, self.in_flight, gauges.running, gauges.waiting, gauges.kv_cache_usage, matched)

    def state(self) -> ReplicaState:
        models = {entry.name: entry.state or "UNKNOWN" for entry in self.models.entries}
        unhealthy = frozenset(name for name, gauges in self.load.by_model.items() if not gauges.healthy)
        breakers = frozenset(self.client.breakers.open_models())
        return ReplicaState(self.url, self.reachable, self.server_ready, models, unhealthy, breakers)


@dataclass
class FleetConfig:
    policy: Policy = "least_load"
    retries: int = 2
    block_chars: int = 256  # prefix
    weights: PrefixWeights = field(default_factory=PrefixWeights)
    index_entries: int = 100_000
    index_bytes: int | None = 32 * 1024 * 1024
    model_refresh_s: float = 2.0
    load_refresh_s: float = 0.25
    dns_refresh_s: float = 5.0
    metrics_port: int = 8002
    request_timeout_s: float = 600.0
    scrape_timeout_s: float = 1.0


class Fleet:
    def __init__(
        self,
        entries: UpstreamEntries,
        static_metrics: dict[str, str],
        make_client: MakeClient,
        config: FleetConfig,
        metrics: RoutingMetrics,
    ) -> None:
        self.entries = entries
        self.config = config
        self.metrics = metrics
        self._make_client = make_client
        self.replicas: dict[str, Replica] = {}
        self._turns = itertools.count()
        self._http = httpx.AsyncClient(timeout=config.scrape_timeout_s)
        self._tasks: list[asyncio.Task[None]] = []
        self._cut_error: OpenAIError | None = None
        # `prefix`: where this process sent which prompt blocks recently.
        self.index = PrefixIndex(config.index_entries, config.index_bytes)
        for url in entries.static:
            self._add(url, static_metrics[url])

    # -- membership -------------------------------------------------------------------------------------------

    def _add(self, url: str, metrics_url: str) -> Replica:
        client = self._make_client(url)
        models = ModelMap(lambda: self._index(replica), self.config.model_refresh_s)
        replica = Replica(url, metrics_url, client, models, ContextLengths(partial(_ask_context_length, client)))
        client.breakers.on_open = lambda model: self.metrics.ejections.labels(url, model).inc()
        self.replicas[url] = replica
        self.metrics.replicas.set(len(self.replicas))
        if self._tasks:  # already running: a replica found by DNS
            replica.models.start()
            if self._cut_error is not None:
                client.cut_streams(self._cut_error)
        return replica

    async def _remove(self, replica: Replica) -> None:
        replica.removed = True
        self.index.forget(replica.url)
        del self.replicas[replica.url]
        self.metrics.replicas.set(len(self.replicas))
        await replica.models.stop()
        while replica.in_flight:  # its open streams finish first
            await asyncio.sleep(0.5)
        await replica.client.close()

    async def _index(self, replica: Replica) -> list[ModelEntry]:
        """One refresh of a replica's model index and readiness; marks it unreachable when it cannot answer."""
        try:
            entries = await replica.client.repository_index()
        except OpenAIError:
            if replica.reachable:  # down: whatever it comes back with, its cache starts empty
                self.index.forget(replica.url)
            replica.reachable = False
            raise
        if not replica.reachable:  # back after an outage: its breakers' cool-downs must not keep it out longer
            replica.client.breakers.reset()
        replica.reachable = True
        ready = await replica.client.server_ready()
        if replica.server_ready and not ready:  # draining: a restart follows
            self.index.forget(replica.url)
        replica.server_ready = ready
        return await replica.context_lengths.annotate(entries)

    async def _resolve_dns(self) -> None:
        loop = asyncio.get_running_loop()
        found: dict[str, str] = {}
        for host, port in self.entries.dns:
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                log.warning("cannot resolve %s: %s", host, exc)
                return  # keep the replicas known until DNS answers again
            for info in infos:
                address = info[4][0]
                url = grpc_target(address, port)
                found[url] = metrics_url_for(url, self.config.metrics_port)
        for url, metrics_url in found.items():
            if url not in self.replicas:
                log.info("replica %s joined", url)
                self._add(url, metrics_url)
        for url, replica in list(self.replicas.items()):
            if url not in found and url not in self.entries.static:
                log.info("replica %s left", url)
                self._tasks.append(asyncio.create_task(self._remove(replica)))

    # -- background -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.entries.dns:
            await self._resolve_dns()
            self._tasks.append(asyncio.create_task(self._every(self.config.dns_refresh_s, self._resolve_dns)))
        for replica in self.replicas.values():
            replica.models.start()
        self._tasks.append(asyncio.create_task(self._every(self.config.load_refresh_s, self._scrape_all)))

    async def _every(self, period_s: float, action: Callable[[], object]) -> None:
        while True:
            try:
                await action()  # type: ignore[misc]
            except Exception:  # a background refresh must never die
                log.exception("fleet refresh failed")
            await asyncio.sleep(period_s)

    async def _scrape(self, replica: Replica) -> None:
        try:
            response = await self._http.get(replica.metrics_url)
            response.raise_for_status()
        except httpx.HTTPError:
            return  # keep the last snapshot; the model index says whether the replica is reachable
        load = load_from_families(parse_families(response.text, replica.url))
        if _turned_unhealthy(replica.load, load):  # its engine restarts: its cache starts empty
            self.index.forget(replica.url)
        replica.load = load

    async def _scrape_all(self) -> None:
        """Each replica's engine gauges. With one replica there is nothing to choose: scraped only for readiness."""
        if len(self.replicas) > 1:
            await asyncio.gather(*(self._scrape(r) for r in list(self.replicas.values())))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for replica in list(self.replicas.values()):
            await replica.models.stop()
            await replica.client.close()
        await self._http.aclose()

    # -- what the rest of the gateway asks ---------------------------------------------------------------------

    def metrics_urls(self) -> list[str]:
        return [replica.metrics_url for replica in self.replicas.values()]

    @property
    def ready(self) -> frozenset[str]:
        """Models READY on at least one replica."""
        return frozenset().union(*(r.models.ready for r in self.replicas.values()))

    async def refresh(self) -> list[ModelEntry]:
        """Every replica's index, refreshed now (one call per replica shared by every caller), merged: a model is
        READY while any replica has it READY. Raises when no replica answers."""
        results = await asyncio.gather(*(r.models.refresh() for r in self.replicas.values()), return_exceptions=True)
        answered = [entries for entries in results if isinstance(entries, list)]
        if not answered:
            error = next((e for e in results if isinstance(e, OpenAIError)), None)
            raise error or UpstreamError(503, "No Triton replica is known.")
        merged: dict[str, ModelEntry] = {}
        for entries in answered:
            for entry in entries:
                if _describes_better(entry, merged.get(entry.name)):
                    merged[entry.name] = entry
        return list(merged.values())

    async def is_served(self, name: str) -> bool:
        """Whether a replica has `name` READY: from memory when one has, after one shared refresh otherwise."""
        if name in self.ready:
            return True
        await self.refresh()
        return name in self.ready

    async def states(self) -> list[ReplicaState]:
        """Every replica's state, refreshed now, for readiness."""
        replicas = list(self.replicas.values())
        await asyncio.gather(*(r.models.refresh() for r in replicas), return_exceptions=True)
        await asyncio.gather(*(self._scrape(r) for r in replicas))
        return [r.state() for r in replicas]

    def cut_streams(self, error: OpenAIError) -> int:
        self._cut_error = error
        return sum(replica.client.cut_streams(error) for replica in self.replicas.values())

    def choose(self, model: str, blocks: list[int], tried: set[str]) -> tuple[Replica, str]:
        """The replica for a request (not one in `tried`) and why; `prefix` records the prompt's blocks there.
        This and `prefix_blocks` are the picker's whole cost per request (bench/picker_cost.py)."""
        fresh = [r for r in self.replicas.values() if r.url not in tried]
        candidates = [r for r in fresh if r.open_to(model)]
        if not candidates:
            # None can take it: one that has the model answers with its own explicit error (breaker, engine).
            candidates = [r for r in fresh if model in r.models.ready] or fresh
            if not candidates:
                raise UpstreamError(503, f"No Triton replica can serve `{model}` now.")
            return candidates[0], "fallback"
        by_url = {r.url: r for r in candidates}
        turn = 0 if tried else next(self._turns)  # a retry does not take the next request's turn
        if blocks:
            views = [r.view(model, self.index.matched(blocks, r.url)) for r in candidates]
        else:
            views = [r.view(model) for r in candidates]
        policy, weights = self.config.policy, self.config.weights
        choice = pick(views, policy, blocks=len(blocks), weights=weights, turn=turn)
        if blocks:
            self.index.record(blocks, choice.replica)
        return by_url[choice.replica], choice.reason

    def prefix_blocks(self, request: GenerateRequest) -> list[int]:
        """What the policy reads of the prompt: `prefix`'s block hashes (none for the other policies)."""
        if self.config.policy == "prefix":
            return block_hashes(prompt_of(request), self.config.block_chars)
        return []

    def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        return self._routed(request)

    async def _routed(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        started = time.monotonic()
        blocks = self.prefix_blocks(request)
        tried: set[str] = set()
        while True:
            replica, reason = self.choose(request.model, blocks, tried)
            if tried:
                reason = "retry"
            m = self.metrics
            m.picks.labels(replica.url, reason).inc()
            m.requests.labels(replica.url, request.model).inc()
            m.in_flight.labels(replica.url).inc()
            replica.in_flight += 1
            stream = replica.client.generate(request)
            try:
                try:
                    first = await anext(stream)
                except StopAsyncIteration:
                    return
                except UpstreamError as exc:
                    if not self._may_retry(exc, len(tried), started):
                        raise
                    tried.add(replica.url)
                    replica.models.refresh_soon()  # a drain or an unload not seen yet: no more requests go there
                    self.index.forget(replica.url)  # and what it had cached may be gone with it
                    m.retries.labels(replica.url).inc()
                    log.info("retrying on another replica: %s failed before the first byte: %s", replica.url, exc)
                    continue
                yield first
                async for chunk in stream:
                    yield chunk
                return
            finally:
                replica.in_flight -= 1
                m.in_flight.labels(replica.url).dec()
                await stream.aclose()  # type: ignore[attr-defined]

    async def tokenize_only(self, call: TokenizerCall) -> TokenizerAnswer:
        """The answer of a replica serving the model, retried elsewhere when one is unavailable, as a generation is."""
        started = time.monotonic()
        tried: set[str] = set()
        while True:
            replica, _ = self.choose(call.model, [], tried)
            try:
                return await replica.client.tokenize_only(call, self.config.request_timeout_s)
            except UpstreamError as exc:
                if not self._may_retry(exc, len(tried), started):
                    raise
                tried.add(replica.url)
                replica.models.refresh_soon()
                log.info("retrying a tokenize request on another replica: %s failed: %s", replica.url, exc)

    def _may_retry(self, exc: UpstreamError, retried: int, started: float) -> bool:
        """Before the first byte only (the caller guarantees it), for UNAVAILABLE-like errors, at most
        `retries` times, within the request's deadline, and only if another replica is left to try."""
        if not exc.retryable or retried >= self.config.retries or self._cut_error is not None:
            return False
        if time.monotonic() - started >= self.config.request_timeout_s:
            return False
        return len(self.replicas) > retried + 1
