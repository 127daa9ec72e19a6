"""`prefix` routing's memory: chained block hashes of prompts, and the bounded index of which replica served which
blocks (gateway/routing/prefix_index.py)."""

from __future__ import annotations

import tracemalloc

from gateway.routing.prefix_index import ENTRY_BYTES, MAX_BLOCKS, PrefixIndex, block_hashes

SYSTEM = "You are a careful assistant. " * 40  # 1,160 characters: 4 full blocks of 256


def test_only_full_blocks_count_and_a_block_hash_names_its_whole_prefix() -> None:
    assert block_hashes("x" * 255, 256) == []
    assert len(block_hashes("x" * 1000, 256)) == 3
    a = block_hashes(SYSTEM + "User: what is 2 + 2?" * 20, 256)
    b = block_hashes(SYSTEM + "User: tell me a story" * 20, 256)
    shared = len(SYSTEM) // 256
    assert a[:shared] == b[:shared] and a[shared] != b[shared]
    # Same second block, different first: every hash differs (chained), unlike hashes of blocks alone.
    c = block_hashes("y" * 256 + SYSTEM[256:], 256)
    assert not set(c) & set(block_hashes(SYSTEM, 256))


def test_blocks_are_characters_and_long_prompts_are_capped() -> None:
    assert len(block_hashes("é" * 512, 256)) == 2  # 1,024 bytes of UTF-8, 2 blocks of characters
    assert len(block_hashes("z" * 256 * (MAX_BLOCKS + 10), 256)) == MAX_BLOCKS


def test_a_replica_matches_the_leading_blocks_it_served_and_no_other() -> None:
    index = PrefixIndex(1000)
    first_turn = block_hashes(SYSTEM + "User: hello there. " * 30, 256)
    index.record(first_turn, "a")
    assert index.matched(first_turn, "a") == len(first_turn)
    assert index.matched(first_turn, "b") == 0
    second_turn = block_hashes(SYSTEM + "User: hello there. " * 30 + "Assistant: hi. User: and then? " * 30, 256)
    assert index.matched(second_turn, "a") == len(first_turn)
    other = block_hashes(SYSTEM + "User: something else entirely. " * 30, 256)
    assert index.matched(other, "a") == len(SYSTEM) // 256
    assert index.matched([], "a") == 0


def test_a_forgotten_replica_matches_nothing_and_the_others_keep_theirs() -> None:
    index = PrefixIndex(1000)
    blocks = block_hashes(SYSTEM, 256)
    index.record(blocks, "a")
    index.record(blocks, "b")
    index.forget("a")
    assert index.matched(blocks, "a") == 0 and index.matched(blocks, "b") == len(blocks)
    index.record(blocks, "a")  # served again after its restart
    assert index.matched(blocks, "a") == len(blocks)


def test_the_least_recent_goes_first_and_never_leaves_a_hole_before_a_known_block() -> None:
    index = PrefixIndex(6)
    a = block_hashes("a" * 256 * 4, 256)
    b = block_hashes("b" * 256 * 3, 256)
    index.record(a, "r")
    index.record(b, "r")  # 7 pairs for 6 places: a's last block goes, not its first
    assert len(index) == 6
    assert index.matched(a, "r") == 3 and index.matched(b, "r") == 3
    index.record(a, "r")  # a is the most recent again: b's blocks go, its last first
    assert index.matched(a, "r") == 4 and index.matched(b, "r") == 2


def test_the_index_is_bounded_in_entries_and_in_memory() -> None:
    assert PrefixIndex(10**6, max_bytes=ENTRY_BYTES * 100).capacity == 100
    assert PrefixIndex(50, max_bytes=10**9).capacity == 50
    index = PrefixIndex(21_846)  # where the hash table is fullest before it grows: the most bytes per entry
    largest = 0.0
    tracemalloc.start()
    try:
        for i in range(8_000):  # four times what fits: evictions leave the table's dead slots behind
            index.record(block_hashes(f"conversation {i}: " + "w" * 256 * 12, 256), f"r{i % 4}")
            if len(index) == index.capacity and i % 100 == 0:
                largest = max(largest, tracemalloc.get_traced_memory()[0] / len(index))
    finally:
        tracemalloc.stop()
    assert len(index) == index.capacity
    assert 0 < largest <= ENTRY_BYTES, largest
