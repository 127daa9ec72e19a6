"""The streamed event sequence of one response (pure), numbered by `sequence_number`.

Order, as OpenAI sends it: `response.created`, `response.in_progress`; per output item `output_item.added`, then
for a message `content_part.added`, `output_text.delta`..., `output_text.done`, `content_part.done`, and for a
function call `function_call_arguments.delta`, `.done`; `output_item.done`; last `response.completed`,
`response.incomplete` or `response.failed`.
"""

from __future__ import annotations

from typing import Any

from gateway.responses.translate import output_text_part

_FINAL = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}


class EventSequence:
    """Makes the events of one response; each call returns its events, numbered on from the last."""

    def __init__(self) -> None:
        self.sequence_number = 0

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence_number, **fields}
        self.sequence_number += 1
        return event

    def start(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        return [self._event("response.created", response=response), self._event("response.in_progress", response=response)]

    def message_start(self, item_id: str, output_index: int) -> list[dict[str, Any]]:
        item = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        return [
            self._event("response.output_item.added", output_index=output_index, item=item),
            self._event(
                "response.content_part.added",
                item_id=item_id,
                output_index=output_index,
                content_index=0,
                part=output_text_part(""),
            ),
        ]

    def text_delta(
        self, item_id: str, output_index: int, delta: str, logprobs: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        return self._event(
            "response.output_text.delta",
            item_id=item_id,
            output_index=output_index,
            content_index=0,
            delta=delta,
            logprobs=logprobs or [],
        )

    def message_done(self, item: dict[str, Any], output_index: int) -> list[dict[str, Any]]:
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": output_index, "content_index": 0}
        return [
            self._event("response.output_text.done", **where, text=part["text"], logprobs=part["logprobs"]),
            self._event("response.content_part.done", **where, part=part),
            self._event("response.output_item.done", output_index=output_index, item=item),
        ]

    def message(self, item: dict[str, Any], output_index: int) -> list[dict[str, Any]]:
        """A whole message at once (one known only when the generation ended, as with tools)."""
        events = self.message_start(item["id"], output_index)
        text = item["content"][0]["text"]
        if text:
            events.append(self.text_delta(item["id"], output_index, text))
        return events + self.message_done(item, output_index)

    def function_call(self, item: dict[str, Any], output_index: int) -> list[dict[str, Any]]:
        where = {"item_id": item["id"], "output_index": output_index}
        return [
            self._event(
                "response.output_item.added",
                output_index=output_index,
                item={**item, "arguments": "", "status": "in_progress"},
            ),
            self._event("response.function_call_arguments.delta", **where, delta=item["arguments"]),
            self._event("response.function_call_arguments.done", **where, name=item["name"], arguments=item["arguments"]),
            self._event("response.output_item.done", output_index=output_index, item=item),
        ]

    def item(self, item: dict[str, Any], output_index: int) -> list[dict[str, Any]]:
        if item["type"] == "function_call":
            return self.function_call(item, output_index)
        return self.message(item, output_index)

    def finish(self, response: dict[str, Any]) -> dict[str, Any]:
        return self._event(_FINAL[response["status"]], response=response)
