"""Backend responses of one stream that arrived together, merged into one.

When the gateway's writer falls behind its gRPC reader (a busy event loop, a slow client), what has
piled up for a stream goes out as one SSE event per choice instead of one per response: texts
concatenated, token counts summed, logprobs appended, the latest finish reason and the final flag kept (and the
prompt's logprobs, which only a generation's first response carries).
"""

from __future__ import annotations

from gateway.core.upstream import GenerateChunk, normalize_finish_reason


def _join_json_lists(parts: list[str]) -> str:
    """The backend's per-response JSON lists (or "null") as one list, without parsing them."""
    items = [part[1:-1] for part in parts if part not in ("", "null", "[]")]
    return "[" + ",".join(items) + "]" if items else parts[-1] if parts else "null"


def _per_sequence(chunks: list[GenerateChunk], field: str) -> list[list]:
    """Each sequence's values of a per-sequence field, in arrival order (responses may leave a field out)."""
    columns: list[list] = []
    for chunk in chunks:
        for index, value in enumerate(getattr(chunk, field)):
            if index == len(columns):
                columns.append([])
            columns[index].append(value)
    return columns


def _latest_reason(reasons: list[str | None]) -> str | None:
    """The last reason that finishes the sequence, else the last one sent ("None" for running)."""
    finishing = [reason for reason in reasons if normalize_finish_reason(reason) is not None]
    return finishing[-1] if finishing else reasons[-1]


def merge_chunks(chunks: list[GenerateChunk]) -> GenerateChunk:
    """One chunk saying what `chunks` (consecutive responses of one stream, in order) say together."""
    if len(chunks) == 1:
        return chunks[0]
    input_tokens = [chunk.num_input_tokens for chunk in chunks if chunk.num_input_tokens is not None]
    prompt_logprobs = [chunk.prompt_logprobs for chunk in chunks if chunk.prompt_logprobs is not None]
    return GenerateChunk(
        texts=["".join(texts) for texts in _per_sequence(chunks, "texts")],
        finish_reasons=[_latest_reason(reasons) for reasons in _per_sequence(chunks, "finish_reasons")],
        num_input_tokens=input_tokens[-1] if input_tokens else None,
        num_output_tokens=[sum(counts) for counts in _per_sequence(chunks, "num_output_tokens")],
        final=chunks[-1].final,
        request_id=next((chunk.request_id for chunk in chunks if chunk.request_id), ""),
        logprobs=[_join_json_lists(parts) for parts in _per_sequence(chunks, "logprobs")],
        prompt_logprobs=prompt_logprobs[0] if prompt_logprobs else None,
    )
