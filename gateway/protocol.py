"""OpenAI request schemas accepted by the gateway. Kept apart from serving logic.

Unknown fields are ignored, as OpenAI-compatible servers do, so clients that send
newer or vendor-specific fields keep working; known fields are validated strictly.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

PositiveInt = Annotated[int, Field(ge=1)]
# The engine serializes integer sampling fields as 64-bit integers: a larger value failed inside it (a 502), so it is
# refused here with a 400, as vLLM's own server bounds its seed.
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
NonNegativeInt64 = Annotated[int, Field(ge=0, le=2**63 - 1)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Request):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: usage so far in every chunk


class SamplingFields(_Request):
    """Sampling fields shared by completions and chat completions."""

    model: str = Field(min_length=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=128)
    stop: str | list[str] | None = None
    seed: Int64 | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    user: str | None = None
    # Extras sent by clients written for vLLM's server.
    top_k: int | None = Field(None, ge=-1, le=2**63 - 1)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0)
    min_tokens: NonNegativeInt64 | None = None
    ignore_eos: bool | None = None
    stop_token_ids: list[NonNegativeInt64] | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        return [s for s in stops if s]

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.continuous_usage_stats)


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[Annotated[int, Field(ge=0, lt=2**31)]] | list[
        Annotated[list[Annotated[int, Field(ge=0, lt=2**31)]], Field(min_length=1)]
    ] = Field(...)
    max_tokens: NonNegativeInt64 | None = 16  # 0 only with `echo` (the prompt alone), as vLLM's server allows
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)

    @field_validator("prompt")
    @classmethod
    def _prompt_not_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("prompt must not be an empty list")
        return value


class TextPart(_Request):
    type: Literal["text"]
    text: str


class ImagePart(_Request):
    type: Literal["image_url"]
    image_url: dict[str, Any]


ContentPart = Annotated[Union[TextPart, ImagePart], Field(discriminator="type")]


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class FunctionDef(_Request):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Request):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Request):
    name: str


class NamedToolChoice(_Request):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Request):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Request):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: PositiveInt | None = None
    max_completion_tokens: PositiveInt | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True

    @property
    def logprobs_top(self) -> int | None:
        """Alternatives per token to return; None when logprobs were not asked for."""
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


# vLLM's /tokenize and /detokenize (not OpenAI's). Token ids fit the backend's INT32 tensor.
TokenId = Annotated[int, Field(ge=0, lt=2**31)]


class TokenizeRequest(_Request):
    """vLLM's two forms in one schema: `prompt` (completions) or `messages` (chat, rendered with the chat
    template); the router refuses neither or both, naming the field."""

    model: str = Field(min_length=1)
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(None, min_length=1)
    # None: vLLM's defaults, true for a prompt and false for messages (the template adds its own).
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = None  # None: true, unless continue_final_message
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[ToolDef] | None = None
    return_token_strs: bool | None = False


class DetokenizeRequest(_Request):
    model: str = Field(min_length=1)
    tokens: list[TokenId] = Field(min_length=1)
