"""Part 4's multi-turn workload (issue 37), pure: conversations of a few turns over a few shared system prompts,
each turn's prompt the whole history so far, as a chat application sends it.

Conversation `i` of a run is a function of the run's tag and `i` alone: its system prompt, drawn with Zipf
popularity (the k-th most popular prompt is drawn in proportion to 1 / k^s, so one or two prompts are hot and the
rest lukewarm), and its number of turns, drawn evenly between the bounds. Turn t's messages are the system prompt,
then t earlier user messages each followed by the assistant's reply, then the user's new message. The assistant's
replies are made-up words of about the reply's length rather than what the model said: the prompts then depend
on nothing but the seed, and the engine's cache holds the reply's tokens either way only up to the point where
the next prompt diverges (its blocks of the previous prompt are what a prefix hit reuses).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

from bench.routing_report import words

MIN_TURNS = 4
MAX_TURNS = 8
ZIPF_EXPONENT = 1.0


@dataclass(frozen=True)
class Conversation:
    index: int
    system: int  # which system prompt, 0 the most popular
    turns: int


def zipf_weights(count: int, exponent: float = ZIPF_EXPONENT) -> list[float]:
    """The popularity of `count` ranked items, summing to 1: item k (from 0) in proportion to 1 / (k + 1)^s."""
    raw = [1.0 / (k + 1) ** exponent for k in range(count)]
    total = sum(raw)
    return [weight / total for weight in raw]


def conversation(
    tag: str,
    index: int,
    prompts: int,
    turns: tuple[int, int] = (MIN_TURNS, MAX_TURNS),
    exponent: float = ZIPF_EXPONENT,
) -> Conversation:
    """Conversation `index` of the run `tag`, over `prompts` system prompts."""
    rng = random.Random(f"{tag}:conversation:{index}")
    system = rng.choices(range(prompts), weights=zipf_weights(prompts, exponent))[0]
    return Conversation(index, system, rng.randint(*turns))


def endless(
    tag: str, prompts: int, turns: tuple[int, int] = (MIN_TURNS, MAX_TURNS), exponent: float = ZIPF_EXPONENT
) -> Iterator[Conversation]:
    """The run's conversations, one after another, for a load that runs until it is told to stop."""
    return (conversation(tag, i, prompts, turns, exponent) for i in itertools.count())


def plan(
    tag: str,
    requests: int,
    prompts: int,
    turns: tuple[int, int] = (MIN_TURNS, MAX_TURNS),
    exponent: float = ZIPF_EXPONENT,
) -> list[Conversation]:
    """The run's first conversations, whose turns add up to `requests` exactly (the last one cut short)."""
    found: list[Conversation] = []
    left = requests
    for candidate in endless(tag, prompts, turns, exponent):
        if left <= 0:
            break
        found.append(candidate if candidate.turns <= left else Conversation(candidate.index, candidate.system, left))
        left -= found[-1].turns
    return found


def user_message(tag: str, conversation_index: int, turn: int, user_words: int) -> str:
    """The user's message at `turn`: distinct from its first characters (so that it starts a block of its own)."""
    return f"User {conversation_index} turn {turn}: {words(f'{tag}-user-{conversation_index}-{turn}', user_words)}?"


def reply(tag: str, conversation_index: int, turn: int, reply_words: int) -> str:
    return words(f"{tag}-reply-{conversation_index}-{turn}", reply_words) + "."


def turn_messages(
    tag: str, talk: Conversation, turn: int, system_prompt: str, user_words: int, reply_words: int
) -> list[dict[str, str]]:
    """What the client sends at `turn` (from 0) of `talk`: the whole history so far, then the new message."""
    if not 0 <= turn < talk.turns:
        raise ValueError(f"conversation {talk.index} has {talk.turns} turns, not a turn {turn}")
    messages = [{"role": "system", "content": system_prompt}]
    for earlier in range(turn):
        messages.append({"role": "user", "content": user_message(tag, talk.index, earlier, user_words)})
        messages.append({"role": "assistant", "content": reply(tag, talk.index, earlier, reply_words)})
    messages.append({"role": "user", "content": user_message(tag, talk.index, turn, user_words)})
    return messages
