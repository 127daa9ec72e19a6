"""Per-key counters: requests and tokens per minute (the `limits` library) and parallel requests.

In memory by default, so each gateway process counts alone; in Redis when GATEWAY_REDIS_URL is set, so every
worker and replica shares one count. Windows are `limits`' fixed windows, which start at a key's first request
and count tokens past the limit too (usage is only known after a generation, so it may overshoot).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

import redis.asyncio as aioredis
from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage, RedisStorage
from limits.aio.strategies import FixedWindowRateLimiter

from gateway.admission.keys import ApiKey
from gateway.admission.policy import Window

# One lease per running request in a sorted set scored by its expiry (Redis' clock): expired leases, left by a
# gateway that died, are dropped before counting.
_ACQUIRE_LEASE = """
local now = redis.call('TIME')
local now_s = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_s)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now_s + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])))
return 1
"""


class ParallelCounter(Protocol):
    async def acquire(self, name: str, limit: int, lease_id: str) -> bool: ...
    async def release(self, name: str, lease_id: str) -> None: ...


class MemoryParallel:
    def __init__(self) -> None:
        self._running: Counter[str] = Counter()

    async def acquire(self, name: str, limit: int, lease_id: str) -> bool:
        if self._running[name] >= limit:
            return False
        self._running[name] += 1
        return True

    async def release(self, name: str, lease_id: str) -> None:
        self._running[name] -= 1
        if self._running[name] <= 0:
            del self._running[name]


class RedisParallel:
    def __init__(self, client: aioredis.Redis, lease_s: float) -> None:
        self._client = client
        self._lease_s = lease_s
        self._acquire = client.register_script(_ACQUIRE_LEASE)

    @staticmethod
    def _set(name: str) -> str:
        return f"gateway:parallel:{name}"

    async def acquire(self, name: str, limit: int, lease_id: str) -> bool:
        return bool(await self._acquire(keys=[self._set(name)], args=[limit, self._lease_s, lease_id]))

    async def release(self, name: str, lease_id: str) -> None:
        await self._client.zrem(self._set(name), lease_id)


@dataclass(frozen=True)
class RateCheck:
    """The outcome of one admission against a key's per-minute limits."""

    refused: str | None  # "requests" or "tokens" when a limit is reached
    requests: Window | None
    tokens: Window | None


class KeyLimiter:
    def __init__(self, redis_url: str | None, lease_s: float) -> None:
        if redis_url:
            self._storage: MemoryStorage | RedisStorage = RedisStorage(
                _limits_uri(redis_url), implementation="redispy", key_prefix="gateway"
            )
            self._redis: aioredis.Redis | None = aioredis.from_url(redis_url)
            self.parallel: ParallelCounter = RedisParallel(self._redis, lease_s)
        else:
            self._storage = MemoryStorage()
            self._redis = None
            self.parallel = MemoryParallel()
        self._windows = FixedWindowRateLimiter(self._storage)

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()

    async def _window(self, item: RateLimitItemPerMinute, name: str) -> Window:
        stats = await self._windows.get_window_stats(item, name)
        return Window(item.amount, stats.remaining, stats.reset_time)

    async def check_rates(self, key: ApiKey) -> RateCheck:
        """Counts one request against `rpm`, and refuses it while the tokens of the window are spent."""
        requests = tokens = None
        if key.rpm is not None:
            item = _requests_item(key.rpm)
            allowed = await self._windows.hit(item, key.name)
            requests = await self._window(item, key.name)
            if not allowed:
                return RateCheck("requests", requests, await self._token_window(key))
        if key.tpm is not None:
            tokens = await self._token_window(key)
            if tokens is not None and tokens.remaining <= 0:
                return RateCheck("tokens", requests, tokens)
        return RateCheck(None, requests, tokens)

    async def windows(self, key: ApiKey) -> tuple[Window | None, Window | None]:
        """The key's requests and tokens windows as they stand, counting nothing."""
        requests = None if key.rpm is None else await self._window(_requests_item(key.rpm), key.name)
        return requests, await self._token_window(key)

    async def _token_window(self, key: ApiKey) -> Window | None:
        return None if key.tpm is None else await self._window(_tokens_item(key.tpm), key.name)

    async def count_tokens(self, key: ApiKey, tokens: int) -> None:
        if key.tpm is not None and tokens > 0:
            await self._windows.hit(_tokens_item(key.tpm), key.name, cost=tokens)


def _requests_item(per_minute: int) -> RateLimitItemPerMinute:
    return RateLimitItemPerMinute(per_minute, namespace="requests")


def _tokens_item(per_minute: int) -> RateLimitItemPerMinute:
    return RateLimitItemPerMinute(per_minute, namespace="tokens")


def _limits_uri(redis_url: str) -> str:
    """`limits`' name for an asyncio Redis storage: `redis://h:p/0` becomes `async+redis://h:p/0`."""
    return redis_url if redis_url.startswith("async+") else f"async+{redis_url}"
