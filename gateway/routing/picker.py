"""Which replica serves a request: a pure function of the replicas' load snapshots.

The shell (`gateway/routing/fleet.py`) keeps each replica's exact in-flight count and its engines' scraped
gauges; this module only decides. Policies:
- `least_load`: the better of two random eligible replicas (the power of two choices: near-best balance without
  every gateway herding onto the same least-loaded replica between two scrapes);
- `prefix`: the prompt's leading characters pick a home replica by rendezvous hashing, the same on every gateway
  replica, so that requests sharing a prefix meet vLLM's prefix cache; a home well above the average load spills
  to the next replica in its rendezvous order (bounded loads), so that one hot prefix cannot melt a replica.
  A prompt too short to carry a prefix signal falls back to `least_load`;
- `round_robin`: in turn.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Policy = Literal["least_load", "prefix", "round_robin"]

# A home replica takes a new request while its load stays within this factor of the mean plus a few requests (the
# slack: at low load a scrape's stale gauges or one request more must not break the affinity).
BOUNDED_LOAD_FACTOR = 1.25
BOUNDED_LOAD_SLACK = 2.0


@dataclass(frozen=True)
class ReplicaView:
    """One eligible replica as the picker sees it (the shell leaves out ejected, draining or unready ones)."""

    name: str
    in_flight: int = 0  # the gateway's own streams on it, exact
    running: float = 0.0  # the engine's gauges for the model, scraped (they include other gateways' requests)
    waiting: float = 0.0
    kv_cache_usage: float = 0.0

    @property
    def load(self) -> float:
        """Requests on the replica, queued ones counted twice (they wait behind the running ones). The gateway's
        own count is exact but local, the engine's is global but a scrape old: the larger of the two is used."""
        return max(float(self.in_flight), self.running + self.waiting) + self.waiting + self.kv_cache_usage


@dataclass(frozen=True)
class Pick:
    replica: str
    reason: str  # only, least_load, round_robin, prefix_home, prefix_spill


def prefix_key(prompt: str, prefix_chars: int) -> bytes | None:
    """The prompt's first `prefix_chars` characters, hashed; None when the prompt is shorter (no signal)."""
    if prefix_chars <= 0 or len(prompt) < prefix_chars:
        return None
    return hashlib.blake2b(prompt[:prefix_chars].encode("utf-8", "surrogatepass"), digest_size=16).digest()


def rendezvous_order(key: bytes, names: Sequence[str]) -> list[str]:
    """Replicas by their rendezvous weight for `key`, highest first: every gateway computes the same order, and a
    replica joining or leaving moves only the keys it wins or held."""

    def weight(name: str) -> int:
        return int.from_bytes(hashlib.blake2b(key + name.encode(), digest_size=8).digest(), "big")

    return sorted(names, key=weight, reverse=True)


def _least_of_two(replicas: Sequence[ReplicaView], rng: random.Random) -> ReplicaView:
    if len(replicas) == 1:
        return replicas[0]
    a, b = rng.sample(list(replicas), 2)
    if a.load == b.load:
        return a  # already random
    return a if a.load < b.load else b


def pick(
    replicas: Sequence[ReplicaView],
    policy: Policy,
    *,
    key: bytes | None = None,
    turn: int = 0,
    rng: random.Random | None = None,
) -> Pick:
    """The replica for one request. `replicas` are the eligible ones (at least one); `turn` is the round-robin
    counter; `key` the prompt's prefix key for `prefix`."""
    if not replicas:
        raise ValueError("no eligible replica")
    if len(replicas) == 1:
        return Pick(replicas[0].name, "only")
    rng = rng or random.Random()
    if policy == "round_robin":
        ordered = sorted(replicas, key=lambda r: r.name)
        return Pick(ordered[turn % len(ordered)].name, "round_robin")
    if policy == "prefix" and key is not None:
        by_name = {r.name: r for r in replicas}
        mean = (sum(r.load for r in replicas) + 1) / len(replicas)  # the new request included
        bound = BOUNDED_LOAD_FACTOR * mean + BOUNDED_LOAD_SLACK
        order = rendezvous_order(key, list(by_name))
        for position, name in enumerate(order):
            if by_name[name].load + 1 <= bound:
                return Pick(name, "prefix_home" if position == 0 else "prefix_spill")
        return Pick(min(replicas, key=lambda r: r.load).name, "prefix_spill")
    return Pick(_least_of_two(replicas, rng).name, "least_load")
