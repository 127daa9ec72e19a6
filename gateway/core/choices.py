"""Accumulation of backend chunks into per-choice text, finish reasons and usage."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.upstream import GenerateChunk, normalize_finish_reason


@dataclass(frozen=True)
class ChoiceDelta:
    index: int
    text: str
    finish_reason: str | None


class ChoiceAccumulator:
    """Tracks `n` sequences of one generation. Chunk texts and token counts are deltas."""

    def __init__(self, n: int, index_offset: int = 0) -> None:
        self.n = n
        self.index_offset = index_offset
        self.texts = [""] * n
        self.finish_reasons: list[str | None] = [None] * n
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def add(self, chunk: GenerateChunk) -> list[ChoiceDelta]:
        if chunk.num_input_tokens is not None:
            self.prompt_tokens = chunk.num_input_tokens
        self.completion_tokens += sum(chunk.num_output_tokens)
        deltas = []
        for i, text in enumerate(chunk.texts[: self.n]):
            reason = normalize_finish_reason(chunk.finish_reasons[i]) if i < len(chunk.finish_reasons) else None
            self.texts[i] += text
            if reason is not None:
                self.finish_reasons[i] = reason
            if text or reason is not None:
                deltas.append(ChoiceDelta(self.index_offset + i, text, reason))
        return deltas

    @property
    def done(self) -> bool:
        return all(reason is not None for reason in self.finish_reasons)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
