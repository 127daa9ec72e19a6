"""Where prompt prefixes were sent recently: chained block hashes of prompts, and an LRU of (block, replica) pairs.

A prompt is cut into blocks of `block_chars` characters of its text (the prompt, or the chat messages as
`fleet.prompt_of` lays them out); only full blocks count, as only full blocks are shared in vLLM's cache. Each
block's hash is chained to the one before it, so a block's hash names the whole prefix up to its end: two prompts
share block i's hash only if they share their first i + 1 blocks. Characters rather than tokens: the gateway has
no token ids for most requests, and tokenizing to route would cost more than routing may. The hash is Python's
own, the fastest at hand; it is salted per process, so the index is each gateway process's own (one gateway
learns from its own requests, as llm-d's approximate prefix scorer does).

The index remembers which replica each request's blocks went to. It is bounded: the least recently used pair goes
first. Blocks are recorded last-first, so a prompt's first block is always more recent than its later ones, and an
entry's eviction never leaves a hole before a block that is still known: whether block i is known for a replica
then says whether blocks 0..i all are, and the longest known prefix is found by bisection. A replica that leaves or
restarts is forgotten at once: its entries are keyed with a per-replica epoch, which forgetting bumps, and the old
ones age out of the LRU.

Pure: no clock, no I/O; the fleet (gateway/routing/fleet.py) calls it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

# A prompt's first blocks only: longer prompts cost no more to route (64k characters at the default block size).
MAX_BLOCKS = 256
# An upper bound of what one entry holds in memory: an OrderedDict slot, its link and its int key, 110 to 240 bytes
# on CPython 3.11 as the hash table fills and grows under eviction (tests/unit/test_routing_prefix_index.py).
ENTRY_BYTES = 256  # with a margin: tracemalloc also counts what else the process allocates meanwhile


def block_hashes(text: str, block_chars: int, max_blocks: int = MAX_BLOCKS) -> list[int]:
    """The chained hashes of `text`'s full blocks of `block_chars` characters, at most `max_blocks` of them."""
    end = min(len(text) // block_chars, max_blocks) * block_chars
    hashes: list[int] = []
    parent = 0
    for start in range(0, end, block_chars):
        parent = hash((parent, text[start : start + block_chars]))
        hashes.append(parent)
    return hashes


class PrefixIndex:
    """Which replica served which prompt blocks recently, for at most `capacity` (block, replica) pairs."""

    def __init__(self, max_entries: int, max_bytes: int | None = None) -> None:
        by_memory = max_entries if max_bytes is None else max_bytes // ENTRY_BYTES
        self.capacity = max(1, min(max_entries, by_memory))
        self._entries: OrderedDict[int, None] = OrderedDict()
        self._salts: dict[str, int] = {}
        self._epochs: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def _salt(self, replica: str) -> int:
        salt = self._salts.get(replica)
        if salt is None:
            salt = self._salts[replica] = hash((replica, self._epochs.get(replica, 0)))
        return salt

    def matched(self, blocks: Sequence[int], replica: str) -> int:
        """How many of the leading `blocks` `replica` served recently (0 to len(blocks))."""
        if not blocks:
            return 0
        salt = self._salt(replica)
        entries = self._entries
        if (blocks[0] ^ salt) not in entries:  # most replicas, for most prompts
            return 0
        if (blocks[-1] ^ salt) in entries:  # the whole prompt (a retry, or the same prompt again)
            return len(blocks)
        low, high = 1, len(blocks) - 1  # blocks[:low] are known; blocks[high:] are not
        while low < high:
            middle = (low + high + 1) // 2
            if (blocks[middle - 1] ^ salt) in entries:
                low = middle
            else:
                high = middle - 1
        return low

    def record(self, blocks: Sequence[int], replica: str) -> None:
        """`replica` got a prompt of these blocks: they are now its most recent, the first block most of all."""
        salt = self._salt(replica)
        entries = self._entries
        move_to_end = entries.move_to_end
        for block in reversed(blocks):
            key = block ^ salt
            if key in entries:
                move_to_end(key)
            else:
                entries[key] = None
        while len(entries) > self.capacity:
            entries.popitem(last=False)

    def forget(self, replica: str) -> None:
        """`replica` left or restarted: nothing it served before counts any more."""
        self._epochs[replica] = self._epochs.get(replica, 0) + 1
        self._salts.pop(replica, None)
