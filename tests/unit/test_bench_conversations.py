"""Part 4's multi-turn workload (bench/conversations.py): Zipf-popular system prompts, 4 to 8 turns, each turn's
prompt the whole history so far."""

from __future__ import annotations

from collections import Counter

import pytest

from bench import conversations as c


def test_zipf_weights_fall_as_one_over_the_rank() -> None:
    weights = c.zipf_weights(4)
    assert abs(sum(weights) - 1.0) < 1e-12
    assert weights[0] / weights[1] == pytest.approx(2.0) and weights[0] / weights[3] == pytest.approx(4.0)
    assert c.zipf_weights(3, exponent=0.0) == pytest.approx([1 / 3] * 3)


def test_conversations_are_fixed_by_the_tag_and_popular_prompts_are_drawn_more() -> None:
    talks = [c.conversation("run", i, 6) for i in range(3000)]
    assert talks == [c.conversation("run", i, 6) for i in range(3000)]
    assert talks != [c.conversation("other", i, 6) for i in range(3000)]
    assert {t.turns for t in talks} == set(range(c.MIN_TURNS, c.MAX_TURNS + 1))
    drawn = Counter(t.system for t in talks)
    assert set(drawn) == set(range(6))
    assert drawn[0] > drawn[1] > drawn[5]
    assert abs(drawn[0] / len(talks) - c.zipf_weights(6)[0]) < 0.03


def test_a_plan_has_exactly_the_requests_asked_for() -> None:
    for requests in (1, 5, 64, 513):
        talks = c.plan("run", requests, 4)
        assert sum(t.turns for t in talks) == requests
        assert all(t.turns >= c.MIN_TURNS for t in talks[:-1])  # only the last one may be cut short
    assert c.plan("run", 64, 4)[:3] == [c.conversation("run", i, 4) for i in range(3)]


def test_each_turn_sends_the_whole_history_so_far() -> None:
    talk = c.Conversation(index=7, system=2, turns=5)
    turns = [c.turn_messages("run", talk, t, "SYSTEM", user_words=6, reply_words=4) for t in range(talk.turns)]
    assert [len(m) for m in turns] == [2, 4, 6, 8, 10]
    for earlier, later in zip(turns, turns[1:]):
        assert later[: len(earlier)] == earlier  # the next prompt extends the last one
        assert [m["role"] for m in later[len(earlier) :]] == ["assistant", "user"]
    assert turns[0][0] == {"role": "system", "content": "SYSTEM"}
    assert turns[0][1]["content"].startswith("User 7 turn 0: ")
    other = c.turn_messages("run", c.Conversation(8, 2, 5), 0, "SYSTEM", 6, 4)
    assert other[1] != turns[0][1]  # conversations sharing a system prompt part after it
    with pytest.raises(ValueError):
        c.turn_messages("run", talk, 5, "SYSTEM", 6, 4)
