"""vLLM's `/tokenize` and `/detokenize`: request bodies to tokenize-only backend calls, answers to vLLM's shapes.

The backend reads a tokenize call's prompt exactly as it reads a generation's, so a chat body here is translated as
`/v1/chat/completions` translates its messages (template messages, `chat_template_kwargs`, tools): the count then
equals that chat completion's `usage.prompt_tokens`.
"""

from __future__ import annotations

from typing import Any

from gateway.core.chat import template_messages
from gateway.core.upstream import TokenizerAnswer, TokenizerCall
from gateway.errors import OpenAIError, bad_request
from gateway.protocol import DetokenizeRequest, TokenizeRequest


def _chat_template_kwargs(body: TokenizeRequest) -> dict[str, Any]:
    continue_final = body.continue_final_message
    if continue_final and body.add_generation_prompt:
        message = "Cannot set both continue_final_message and add_generation_prompt to true."
        raise bad_request(message, "continue_final_message")
    kwargs = dict(body.chat_template_kwargs or {})
    generation_prompt = body.add_generation_prompt
    kwargs["add_generation_prompt"] = not continue_final if generation_prompt is None else generation_prompt
    if continue_final:
        kwargs["continue_final_message"] = True
    if body.tools:
        kwargs["tools"] = [tool.model_dump(exclude_none=True) for tool in body.tools]
    return kwargs


def tokenize_call(body: TokenizeRequest, model: str, request_id: str) -> TokenizerCall:
    """The backend call for either form; neither or both forms is the client's error, named."""
    if body.prompt is None and body.messages is None:
        raise bad_request("Either prompt or messages is required.", "prompt")
    if body.prompt is not None and body.messages is not None:
        raise bad_request("Give either prompt or messages, not both.", "messages")
    common = {"add_special_tokens": body.add_special_tokens, "return_token_strs": bool(body.return_token_strs)}
    if body.prompt is not None:
        return TokenizerCall(model, request_id, text_input=body.prompt, **common)
    return TokenizerCall(
        model,
        request_id,
        messages=template_messages(body.messages or []),
        chat_template_kwargs=_chat_template_kwargs(body),
        **common,
    )


def detokenize_call(body: DetokenizeRequest, model: str, request_id: str) -> TokenizerCall:
    return TokenizerCall(model, request_id, prompt_token_ids=list(body.tokens))


def tokenize_param(body: TokenizeRequest) -> str:
    """The field a backend's refusal of a tokenize call is about: only the prompt reaches it."""
    return "messages" if body.messages is not None else "prompt"


def naming(error: OpenAIError, param: str) -> OpenAIError:
    """A client error from the backend, which does not know the HTTP body's field names, named after `param`."""
    if error.status == 400 and error.param is None:
        error.param = param
    return error


def tokenize_response(answer: TokenizerAnswer, return_token_strs: bool) -> dict[str, Any]:
    return {
        "count": len(answer.token_ids),
        "max_model_len": answer.max_model_len,
        "tokens": answer.token_ids,
        "token_strs": answer.token_strs if return_token_strs else None,
    }


def detokenize_response(answer: TokenizerAnswer) -> dict[str, Any]:
    return {"prompt": answer.text}
