"""The seam routers use: `async with admission.slot(caller, model) as slot:` around one generation.

Entering checks, in order: engine-queue shedding, the key's requests and tokens per minute, the key's parallel
requests, then the gateway's global slots (GATEWAY_MAX_IN_FLIGHT, with a bounded, timed wait queue). A refusal
raises an OpenAIError (429 or 503 with Retry-After). Leaving releases everything and counts the generation's
tokens against the key; a streamed response hands its slot over (`hand_over`) and releases it when it ends,
finishes, fails or loses its client.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from redis.exceptions import RedisError

from gateway.admission.auth import Caller
from gateway.admission.keys import ApiKey
from gateway.admission.limiter import KeyLimiter
from gateway.admission.metrics import AdmissionMetrics
from gateway.admission.policy import Decision, Window, decide, ratelimit_headers, retry_after_s, shed, waiting_by_model
from gateway.errors import OpenAIError
from gateway.observability.federation import TritonMetricsFederation

log = logging.getLogger("gateway.admission")

_BUSY_RETRY_S = 1


def _busy(message: str) -> OpenAIError:
    return OpenAIError(503, message, code="server_busy", headers={"Retry-After": str(_BUSY_RETRY_S)})


class GlobalSlots:
    """At most `max_in_flight` generations in this process; up to `max_queued` more wait, first come first
    served, each at most `queue_timeout_s`."""

    def __init__(self, max_in_flight: int | None, max_queued: int, queue_timeout_s: float, metrics: AdmissionMetrics):
        self.max_in_flight = max_in_flight
        self.max_queued = max_queued
        self.queue_timeout_s = queue_timeout_s
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._metrics = metrics

    async def acquire(self) -> str | None:
        """None once a slot is held; otherwise the reason of the refusal (`queue_full`, `queue_timeout`)."""
        decision = decide(self.in_flight, len(self._waiters), self.max_in_flight, self.max_queued)
        if decision is Decision.ADMIT:
            self._take()
            return None
        if decision is Decision.REFUSE:
            return "queue_full"
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(turn)
        self._metrics.queued.inc()
        admitted = False
        try:
            async with asyncio.timeout(self.queue_timeout_s):
                await turn
            admitted = True
            return None
        except TimeoutError:
            return "queue_timeout"
        finally:
            self._metrics.queued.dec()
            if turn in self._waiters:
                self._waiters.remove(turn)
            elif not admitted and turn.done() and not turn.cancelled():
                self.release()  # the slot came just as this waiter gave up: pass it on

    def _take(self) -> None:
        self.in_flight += 1
        self._metrics.in_flight.inc()

    def release(self) -> None:
        """Hands the slot to the first waiter still waiting, or frees it."""
        while self._waiters:
            turn = self._waiters.popleft()
            if not turn.done():
                turn.set_result(None)  # in_flight unchanged: the slot changes hands
                return
        self.in_flight -= 1
        self._metrics.in_flight.dec()


class EngineQueues:
    """The engines' waiting requests per model, scraped from Triton in the background (only when shedding)."""

    def __init__(self, federation: TritonMetricsFederation, refresh_s: float) -> None:
        self._federation = federation
        self._refresh_s = refresh_s
        self.waiting: dict[str, float] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            results = await self._federation.fetch_all()
            self.waiting = waiting_by_model([family for result in results for family in result.families])
            try:
                await asyncio.wait_for(stop.wait(), self._refresh_s)
            except TimeoutError:
                pass


class Slot:
    """One admitted generation. `count` records its tokens; `release` (idempotent) frees what it holds."""

    def __init__(self, admission: Admission, key: ApiKey | None, lease_id: str, holds_parallel: bool) -> None:
        self._admission = admission
        self.key = key
        self._lease_id = lease_id
        self._holds_parallel = holds_parallel
        self.tokens = 0
        self.handed_over = False
        self._released = False

    @property
    def counts_tokens(self) -> bool:
        """Whether the generation's tokens count against a limit (and so must be known however it ends)."""
        return self.key is not None and self.key.tpm is not None

    def count(self, tokens: int) -> None:
        self.tokens = tokens

    def hand_over(self) -> Callable[[], Awaitable[None]]:
        """For a response that outlives the handler (a stream): the slot stays held until the returned
        function is awaited."""
        self.handed_over = True
        return self.release

    async def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._admission.global_slots.release()  # first, and without awaiting: nothing can stop it
        if self.key is None:
            return
        # Shielded: the storage calls finish even when the task releasing the slot is being cancelled.
        await asyncio.shield(self._admission.release_key(self.key, self._lease_id, self._holds_parallel, self.tokens))


class Admission:
    def __init__(
        self,
        limiter: KeyLimiter,
        global_slots: GlobalSlots,
        metrics: AdmissionMetrics,
        engine_queues: EngineQueues | None = None,
        shed_waiting_above: int | None = None,
    ) -> None:
        self.limiter = limiter
        self.global_slots = global_slots
        self.metrics = metrics
        self.engine_queues = engine_queues
        self.shed_waiting_above = shed_waiting_above

    def _refuse(self, caller: Caller, reason: str, error: OpenAIError) -> OpenAIError:
        self.metrics.rejections.labels(reason, caller.name).inc()
        return error

    @asynccontextmanager
    async def slot(self, caller: Caller, model: str) -> AsyncIterator[Slot]:
        slot = await self._admit(caller, model)
        try:
            yield slot
        except BaseException:
            await slot.release()
            raise
        if not slot.handed_over:
            await slot.release()

    async def _admit(self, caller: Caller, model: str) -> Slot:
        waiting = self.engine_queues.waiting if self.engine_queues is not None else {}
        if shed(waiting, model, self.shed_waiting_above):
            raise self._refuse(caller, "shed", _busy(f"The model `{model}` is overloaded; retry shortly."))
        key = caller.key
        lease_id = uuid.uuid4().hex
        holds_parallel = False
        if key is not None:
            try:
                holds_parallel = await self._admit_key(caller, key, lease_id)
            except RedisError:
                log.exception("the rate-limit storage failed")
                raise self._refuse(caller, "unavailable", _busy("The rate limiter is unavailable.")) from None
        try:
            refused = await self.global_slots.acquire()
        except BaseException:
            await self._drop_parallel(key, lease_id, holds_parallel)
            raise
        if refused is not None:
            await self._drop_parallel(key, lease_id, holds_parallel)
            raise self._refuse(caller, refused, _busy("The server is busy; retry shortly."))
        return Slot(self, key, lease_id, holds_parallel)

    async def _drop_parallel(self, key: ApiKey | None, lease_id: str, holds_parallel: bool) -> None:
        if key is None or not holds_parallel:
            return
        try:
            await asyncio.shield(self.limiter.parallel.release(key.name, lease_id))
        except RedisError:
            log.exception("the rate-limit storage failed; a parallel lease of %s expires by itself", key.name)

    async def _admit_key(self, caller: Caller, key: ApiKey, lease_id: str) -> bool:
        """Applies the key's limits; True when it holds a parallel lease (to release with the slot)."""
        if key.has_rate_limits:
            check = await self.limiter.check_rates(key)
            caller.response_headers.update(ratelimit_headers(check.requests, check.tokens, time.time()))
            if check.refused is not None:
                window = check.requests if check.refused == "requests" else check.tokens
                raise self._refuse(caller, "rate_limit", _rate_limited(key, check.refused, window))
        if key.parallel is None:
            return False
        if not await self.limiter.parallel.acquire(key.name, key.parallel, lease_id):
            error = OpenAIError(
                429,
                f"Too many parallel requests for key `{key.name}`: limit {key.parallel}.",
                type="requests",
                code="rate_limit_exceeded",
                headers={"Retry-After": "1"},
            )
            raise self._refuse(caller, "rate_limit", error)
        return True

    async def current_headers(self, key: ApiKey) -> dict[str, str]:
        """The x-ratelimit headers of a key's response that did not go through admission (a 404, /v1/models)."""
        try:
            requests, tokens = await self.limiter.windows(key)
        except RedisError:
            return {}
        return ratelimit_headers(requests, tokens, time.time())

    async def release_key(self, key: ApiKey, lease_id: str, holds_parallel: bool, tokens: int) -> None:
        try:
            if holds_parallel:
                await self.limiter.parallel.release(key.name, lease_id)
            await self.limiter.count_tokens(key, tokens)
            self.metrics.key_tokens.labels(key.name).inc(tokens)
        except RedisError:
            log.exception("the rate-limit storage failed; a parallel lease of %s expires by itself", key.name)


def _rate_limited(key: ApiKey, kind: str, window: Window | None) -> OpenAIError:
    limit = window.limit if window is not None else 0
    retry = retry_after_s(window.reset_at, time.time()) if window is not None else 1
    per_minute = "requests per min (RPM)" if kind == "requests" else "tokens per min (TPM)"
    return OpenAIError(
        429,
        f"Rate limit reached for key `{key.name}` on {per_minute}: limit {limit}. Retry in {retry}s.",
        type=kind,
        code="rate_limit_exceeded",
        headers={"Retry-After": str(retry)},
    )
