"""The picker's micro-benchmark runs the fleet's own decision on long chats (bench/picker_cost.py); no timing is
asserted here, only that it routes what it says it routes."""

from __future__ import annotations

import asyncio

from bench.picker_cost import conversation, measure


def test_a_conversation_reaches_its_length_after_its_system_prompt() -> None:
    chat = conversation("Be brief.", "seed", 3000)
    assert chat[0] == {"role": "system", "content": "Be brief."}
    assert [m["role"] for m in chat[1:3]] == ["user", "assistant"]
    assert sum(len(m["content"]) for m in chat) >= 3000


def test_prefix_picks_fill_the_index_and_other_policies_leave_it_empty() -> None:
    row = asyncio.run(measure("prefix", 2, 4000, conversations=20, systems=2, picks=20))
    assert row["prompt_chars"] >= 4000 and row["index_entries"] >= 20 * 4  # each chat: blocks of its own
    assert row["us_per_pick_median"] > 0
    assert asyncio.run(measure("least_load", 2, 4000, conversations=20, systems=2, picks=20))["index_entries"] == 0
