from __future__ import annotations

import random
from collections import Counter

import pytest

from gateway.core.upstream import GenerateRequest
from gateway.routing.fleet import prompt_of
from gateway.routing.picker import Pick, PrefixWeights, ReplicaView, pick


def _views(*loads: int) -> list[ReplicaView]:
    return [ReplicaView(f"r{i}", in_flight=load) for i, load in enumerate(loads)]


def test_one_replica_is_the_only_choice() -> None:
    assert pick(_views(5), "least_load").reason == "only"


def test_no_replica_is_an_error() -> None:
    with pytest.raises(ValueError):
        pick([], "least_load")


def test_least_load_takes_the_lighter_of_two() -> None:
    rng = random.Random(1)
    replicas = _views(10, 0)
    assert {pick(replicas, "least_load", rng=rng).replica for _ in range(20)} == {"r1"}


def test_least_load_spreads_even_load_and_avoids_the_heaviest() -> None:
    rng = random.Random(2)
    counts = Counter(pick(_views(0, 0, 0), "least_load", rng=rng).replica for _ in range(300))
    assert set(counts) == {"r0", "r1", "r2"} and min(counts.values()) > 50
    counts = Counter(pick(_views(0, 0, 50), "least_load", rng=rng).replica for _ in range(300))
    assert counts["r2"] == 0  # it loses every comparison it is drawn into


def test_engine_gauges_count_and_waiting_counts_twice() -> None:
    busy_engine = ReplicaView("a", in_flight=0, running=4, waiting=3)  # other gateways' load
    assert busy_engine.load == 4 + 3 + 3
    assert ReplicaView("b", in_flight=6, running=2).load == 6  # the exact own count when it is larger


def test_round_robin_goes_in_turn() -> None:
    replicas = _views(9, 0, 0)
    assert [pick(replicas, "round_robin", turn=t).replica for t in range(4)] == ["r0", "r1", "r2", "r0"]


def test_a_short_prompt_has_no_prefix_signal_and_balances_by_load() -> None:
    assert pick(_views(10, 0), "prefix", blocks=0, rng=random.Random(3)) == Pick("r1", "least_load")


def test_the_prompt_of_chat_and_completions() -> None:
    chat = GenerateRequest("m", "id", {}, True, messages=[{"role": "system", "content": "Be brief."},
                                                          {"role": "user", "content": "Hi"}])  # fmt: skip
    assert prompt_of(chat).startswith("system\x1fBe brief.\x1euser\x1fHi")
    assert prompt_of(GenerateRequest("m", "id", {}, True, text_input="Once")) == "Once"
    assert prompt_of(GenerateRequest("m", "id", {}, True, prompt_token_ids=[1, 2])) == "1 2"


# `prefix`: each replica's matched share of the prompt's blocks against its load.


def _scored(*replicas: tuple[int, int]) -> list[ReplicaView]:
    """(matched blocks, in-flight requests) per replica."""
    return [ReplicaView(f"r{i}", in_flight=load, matched=m) for i, (m, load) in enumerate(replicas)]


def test_the_replica_holding_the_longest_prefix_wins_at_equal_load() -> None:
    assert pick(_scored((4, 3), (10, 3), (2, 3)), "prefix", blocks=10) == Pick("r1", "prefix_home")


def test_a_prompt_no_replica_has_seen_goes_where_the_load_is_lowest() -> None:
    rng = random.Random(4)
    assert {pick(_scored((0, 9), (0, 2)), "prefix", blocks=8, rng=rng) for _ in range(20)} == {Pick("r1", "least_load")}


def test_a_home_keeps_its_prompt_until_it_is_overloaded_then_the_prompt_spills() -> None:
    # The whole prompt on r0: it stays there at three times r1's load, and goes at four times (defaults).
    assert pick(_scored((8, 24), (0, 8)), "prefix", blocks=8) == Pick("r0", "prefix_home")
    assert pick(_scored((8, 32), (0, 8)), "prefix", blocks=8) == Pick("r1", "prefix_spill")
    # A stale scrape at low load does not move it.
    assert pick(_scored((8, 3), (0, 0)), "prefix", blocks=8) == Pick("r0", "prefix_home")


def test_a_conversation_stays_with_its_history_not_with_its_system_prompt() -> None:
    """r0 served this conversation's earlier turns (9 of 10 blocks); r1 only the shared system prompt (4 blocks),
    and is a little less busy."""
    assert pick(_scored((9, 12), (4, 9)), "prefix", blocks=10).replica == "r0"


def test_a_hot_prefix_held_by_several_replicas_goes_to_the_less_loaded_one() -> None:
    assert pick(_scored((6, 10), (6, 4)), "prefix", blocks=6) == Pick("r1", "prefix_home")


def test_ties_go_to_least_loads_pick_among_the_tied() -> None:
    picks = Counter(pick(_scored((5, 2), (5, 2), (1, 2)), "prefix", blocks=5, rng=random.Random(s)).replica
                    for s in range(200))  # fmt: skip
    assert set(picks) == {"r0", "r1"} and min(picks.values()) > 40


def test_the_weights_set_how_much_a_match_is_worth_against_load() -> None:
    replicas = _scored((8, 12), (0, 6))
    assert pick(replicas, "prefix", blocks=8).replica == "r0"
    assert pick(replicas, "prefix", blocks=8, weights=PrefixWeights(prefix=0.2)).replica == "r1"
    assert pick(replicas, "prefix", blocks=8, weights=PrefixWeights(load=0.0)).replica == "r0"


def test_a_prompt_shorter_than_a_block_is_balanced_by_load() -> None:
    assert pick(_scored((0, 10), (0, 0)), "prefix", blocks=0, rng=random.Random(5)) == Pick("r1", "least_load")
