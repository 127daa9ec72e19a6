"""Which replica serves a request: a pure function of the replicas' load snapshots.

The shell (`gateway/routing/fleet.py`) keeps each replica's exact in-flight count, its engines' scraped gauges and
the prefix index (`gateway/routing/prefix_index.py`); this module only decides. Policies:
- `least_load`: the better of two random eligible replicas (the power of two choices: near-best balance without
  every gateway herding onto the same least-loaded replica between two scrapes);
- `prefix`: each replica is scored by the share of the prompt's leading blocks it served recently, weighed
  against its load (`score = w_prefix * matched_fraction - w_load * load / (mean load + slack)`), and the best
  wins, as llm-d's inference scheduler scores its pods. A prompt no replica has seen goes where the load is
  lowest (`least_load`'s pick), and then stays there while that replica is not overloaded; a hot prefix whose
  home is overloaded spills, and so comes to live on several replicas. A prompt shorter than a block has no
  prefix signal and is balanced by load;
- `round_robin`: in turn.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

Policy = Literal["least_load", "prefix", "round_robin"]


# One generator for every pick: seeding a new one costs more than the rest of a pick (about 10 µs, os.urandom).
_RNG = random.Random()


class ReplicaView(NamedTuple):
    """One eligible replica as the picker sees it (the shell leaves out ejected, draining or unready ones). A named
    tuple: one is made per replica per request, and a frozen dataclass costs three times as much to make."""

    name: str
    in_flight: int = 0  # the gateway's own streams on it, exact
    running: float = 0.0  # the engine's gauges for the model, scraped (they include other gateways' requests)
    waiting: float = 0.0
    kv_cache_usage: float = 0.0
    matched: int = 0  # `prefix`: how many of the prompt's leading blocks it served recently

    @property
    def load(self) -> float:
        """Requests on the replica, queued ones counted twice (they wait behind the running ones). The gateway's
        own count is exact but local, the engine's is global but a scrape old: the larger of the two is used."""
        return max(float(self.in_flight), self.running + self.waiting) + self.waiting + self.kv_cache_usage


@dataclass(frozen=True)
class Pick:
    replica: str
    reason: str  # only, least_load, round_robin, prefix_home, prefix_spill


@dataclass(frozen=True)
class PrefixWeights:
    """`prefix`'s score: `prefix * matched_fraction - load * load / (mean load + load_slack)`. With the defaults,
    a replica holding the whole prompt keeps it until its load is about three times the other's (at two
    replicas), one holding half of it until about 1.7 times; the slack (in requests) keeps a scrape's stale gauges
    or one request more from breaking the affinity at low load."""

    prefix: float = 1.0
    load: float = 1.0
    load_slack: float = 2.0


def _by_score(
    replicas: Sequence[ReplicaView], blocks: int, weights: PrefixWeights, rng: random.Random
) -> Pick:
    """The best-scoring replica, `prefix * matched / blocks - load_weight * load / (mean load + slack)`; ties go to
    `least_load`'s pick among the tied, as does a prompt none has seen. (Written out flat: it runs per replica
    per request.)"""
    longest = max(r.matched for r in replicas)
    if longest == 0:
        return Pick(_least_of_two(replicas, rng).name, "least_load")
    loads = [r.load for r in replicas]
    per_block = weights.prefix / blocks
    per_load = weights.load / (sum(loads) / len(loads) + weights.load_slack)
    scores = [per_block * r.matched - per_load * load for r, load in zip(replicas, loads)]
    best = max(scores) - 1e-9
    tied = [r for r, s in zip(replicas, scores) if s >= best]
    chosen = tied[0] if len(tied) == 1 else _least_of_two(tied, rng)
    return Pick(chosen.name, "prefix_home" if chosen.matched == longest else "prefix_spill")


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
    blocks: int = 0,
    weights: PrefixWeights = PrefixWeights(),
    turn: int = 0,
    rng: random.Random | None = None,
) -> Pick:
    """The replica for one request. `replicas` are the eligible ones (at least one); `turn` is the round-robin
    counter; `blocks` the prompt's block count for `prefix` (each view's `matched` out of it)."""
    if not replicas:
        raise ValueError("no eligible replica")
    if len(replicas) == 1:
        return Pick(replicas[0].name, "only")
    rng = rng or _RNG
    if policy == "round_robin":
        ordered = sorted(replicas, key=lambda r: r.name)
        return Pick(ordered[turn % len(ordered)].name, "round_robin")
    if policy == "prefix" and blocks > 0:
        return _by_score(replicas, blocks, weights, rng)
    return Pick(_least_of_two(replicas, rng).name, "least_load")
