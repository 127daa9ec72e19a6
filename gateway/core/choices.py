"""Accumulation of backend chunks into per-choice text, finish reasons and usage."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.core.logprobs import Position, parse_positions
from gateway.core.upstream import GenerateChunk, normalize_finish_reason


@dataclass(slots=True)  # not frozen, as GenerateChunk: one per token
class ChoiceDelta:
    index: int
    text: str
    finish_reason: str | None
    logprobs: list[Position] = field(default_factory=list)
    prompt_logprobs: list[Position] = field(default_factory=list)  # in the choice's first delta after they came


class ChoiceAccumulator:
    """Tracks the `n` choices of a response, which may come from several generations (one per
    prompt): a generation's chunk fills the choices from its `offset` on. Texts and counts are deltas."""

    def __init__(self, n: int, top_logprobs: int | None = None) -> None:
        """`top_logprobs`: how many alternatives per token to keep; None when logprobs were not asked for."""
        self.n = n
        self.top_logprobs = top_logprobs
        self.logprobs: list[list[Position]] = [[] for _ in range(n)]
        self.prompt_logprobs: list[list[Position]] = [[] for _ in range(n)]  # each choice's prompt, when asked for
        self._prompt_logprobs_undelivered: set[int] = set()
        self._parts: list[list[str]] = [[] for _ in range(n)]  # joined once at the end, not per token
        self.finish_reasons: list[str | None] = [None] * n
        self.prompt_tokens_by_offset: dict[int, int] = {}
        self.completion_tokens = 0

    @property
    def texts(self) -> list[str]:
        return ["".join(parts) for parts in self._parts]

    @property
    def prompt_tokens(self) -> int:
        return sum(self.prompt_tokens_by_offset.values())

    def add(self, chunk: GenerateChunk, offset: int = 0) -> list[ChoiceDelta]:
        if chunk.num_input_tokens is not None:
            self.prompt_tokens_by_offset[offset] = chunk.num_input_tokens
        self.completion_tokens += sum(chunk.num_output_tokens)
        if chunk.prompt_logprobs is not None and self.top_logprobs is not None:
            self._add_prompt_logprobs(parse_positions(chunk.prompt_logprobs, self.top_logprobs), offset, chunk)
        deltas = []
        for j, text in enumerate(chunk.texts[: self.n - offset]):
            i = offset + j
            reason = normalize_finish_reason(chunk.finish_reasons[j]) if j < len(chunk.finish_reasons) else None
            positions = []
            if self.top_logprobs is not None and j < len(chunk.logprobs):
                positions = parse_positions(chunk.logprobs[j], self.top_logprobs)
                self.logprobs[i] += positions
            if text:
                self._parts[i].append(text)
            if reason is not None:
                self.finish_reasons[i] = reason
            prompt = self._take_prompt_logprobs(i) if self._prompt_logprobs_undelivered else []
            if text or reason is not None or positions or prompt:  # a token may decode to no text yet
                deltas.append(ChoiceDelta(i, text, reason, positions, prompt))
        return deltas

    def _add_prompt_logprobs(self, positions: list[Position], offset: int, chunk: GenerateChunk) -> None:
        """A generation's prompt is the prompt of each of its choices (the backend sends every sequence's text)."""
        for i in range(offset, min(offset + len(chunk.texts), self.n)):
            self.prompt_logprobs[i] = positions
            self._prompt_logprobs_undelivered.add(i)

    def _take_prompt_logprobs(self, index: int) -> list[Position]:
        """The choice's prompt logprobs the first time it has a delta after they came, then nothing."""
        if index not in self._prompt_logprobs_undelivered:
            return []
        self._prompt_logprobs_undelivered.discard(index)
        return self.prompt_logprobs[index]


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
