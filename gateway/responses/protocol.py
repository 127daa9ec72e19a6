"""The `POST /v1/responses` request schema.

Unlike chat, a field we cannot honour is refused with a 400 that names it: the Responses API carries features
(built-in tools, background runs, reasoning) whose silent omission would change what a client gets. Fields that a
client may send with their default or a null value (SDKs and agent frameworks do) are accepted in that form.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.errors import OpenAIError, bad_request


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputText(_Strict):
    type: Literal["input_text", "output_text", "text"]
    text: str
    annotations: list[Any] | None = None  # output_text parts echoed back by clients
    logprobs: list[Any] | None = None


class MessageItem(_Strict):
    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[InputText]
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Any = None


class FunctionCallItem(_Strict):
    type: Literal["function_call"]
    id: str | None = None
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"]
    id: str | None = None
    call_id: str = Field(min_length=1)
    output: str | list[InputText]
    status: Literal["in_progress", "completed", "incomplete"] | None = None


InputItem = Annotated[Union[MessageItem, FunctionCallItem, FunctionCallOutputItem], Field(discriminator="type")]


class FunctionTool(_Strict):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamedFunction(_Strict):
    type: Literal["function"]
    name: str


class TextFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _schema_given(self) -> TextFormat:
        if self.type == "json_schema" and (self.schema_ is None or not self.name):
            raise ValueError("text.format json_schema needs `name` and `schema`")
        return self


class TextParam(_Strict):
    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = None  # the only one a plain model honours: it has no such knob


# Fields a client may send only with these values (SDKs fill some in): anything else is refused by name.
_DEFAULT_ONLY: dict[str, tuple[Any, ...]] = {
    "background": (False, None),
    "truncation": ("disabled", None),
    "reasoning": (None,),
    "service_tier": ("auto", "default", None),
    "max_tool_calls": (None,),
    "top_logprobs": (None, 0),
    "conversation": (None,),
    "prompt": (None,),
    "stream_options": (None,),
    "safety_identifier": (None,),
    "prompt_cache_key": (None,),
    "prompt_cache_retention": (None,),
}
# The only `include` value that applies to a plain text model's output; the others name built-in tools.
LOGPROBS_INCLUDE = "message.output_text.logprobs"
_INCLUDABLE: frozenset[str] = frozenset({LOGPROBS_INCLUDE})


class ResponsesRequest(BaseModel):
    """A request to `POST /v1/responses`. Unknown fields are kept so that they can be refused by name."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | None = None
    text: TextParam | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = Field(None, max_length=16)
    user: str | None = None
    store: bool = True
    previous_response_id: str | None = None
    include: list[str] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool = False

    @field_validator("input", mode="before")
    @classmethod
    def _typed_messages(cls, value: Any) -> Any:
        """`{"role", "content"}` without a type is a message (OpenAI's "easy input message")."""
        if isinstance(value, list):
            return [
                {**item, "type": "message"} if isinstance(item, dict) and "type" not in item and "role" in item else item
                for item in value
            ]
        return value

    @property
    def logprobs(self) -> int | None:
        """Alternatives per token to return with the text, when `include` asks for logprobs; else None."""
        return (self.top_logprobs or 0) if LOGPROBS_INCLUDE in (self.include or []) else None

    def refuse_unsupported(self) -> None:
        """Raises a 400 naming the first field, or field value, that the gateway cannot honour."""
        for name, value in (self.model_extra or {}).items():
            allowed = _DEFAULT_ONLY.get(name)
            if allowed is None:
                raise bad_request(f"The field `{name}` is not supported by this server.", name)
            if value not in allowed:
                raise bad_request(f"The field `{name}` is supported only as {allowed[0]!r}.", name)
        for value in self.include or []:
            if value not in _INCLUDABLE:
                raise bad_request(f"include value `{value}` is not supported by this server.", "include")
        if isinstance(self.input, list) and not self.input and self.previous_response_id is None:
            raise bad_request("input must not be an empty list.", "input")


def not_found(response_id: str) -> OpenAIError:
    return OpenAIError(404, f"No response found with id '{response_id}'.", param="response_id")
