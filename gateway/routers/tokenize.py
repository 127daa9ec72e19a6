"""vLLM's `POST /tokenize` and `POST /detokenize` (also under `/v1`): answered by the model's backend from its
tokenizer, without running the engine. Keys and admission apply as to a generation; no tokens are counted."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from gateway.admission import Admission, caller_of
from gateway.core import tokenize
from gateway.core.upstream import TokenizerAnswer, TokenizerCall
from gateway.errors import JSONBytesResponse, OpenAIError
from gateway.observability.request_context import request_record
from gateway.protocol import DetokenizeRequest, TokenizeRequest
from gateway.routers.deps import admission, request_id, resolve_model, triton
from gateway.routing.fleet import Fleet

router = APIRouter(tags=["tokenize"])


async def _answer(
    request: Request, client: Fleet, gate: Admission, call: TokenizerCall, endpoint: str, param: str
) -> TokenizerAnswer:
    record = request_record(request.scope)
    if record is not None:
        record.model, record.endpoint = call.model, endpoint
    async with gate.slot(caller_of(request.scope), call.model):
        try:
            answer = await client.tokenize_only(call)
        except OpenAIError as exc:
            raise tokenize.naming(exc, param) from None
    if record is not None:
        record.prompt_tokens = len(answer.token_ids)
    return answer


@router.post("/tokenize")
@router.post("/v1/tokenize", include_in_schema=False)
async def create_tokenize(
    body: TokenizeRequest,
    request: Request,
    client: Fleet = Depends(triton),
    gate: Admission = Depends(admission),
) -> JSONBytesResponse:
    model = await resolve_model(request, body.model)
    call = tokenize.tokenize_call(body, model, request_id(request))
    answer = await _answer(request, client, gate, call, "tokenize", tokenize.tokenize_param(body))
    return JSONBytesResponse(tokenize.tokenize_response(answer, bool(body.return_token_strs)))


@router.post("/detokenize")
@router.post("/v1/detokenize", include_in_schema=False)
async def create_detokenize(
    body: DetokenizeRequest,
    request: Request,
    client: Fleet = Depends(triton),
    gate: Admission = Depends(admission),
) -> JSONBytesResponse:
    model = await resolve_model(request, body.model)
    call = tokenize.detokenize_call(body, model, request_id(request))
    answer = await _answer(request, client, gate, call, "detokenize", "tokens")
    return JSONBytesResponse(tokenize.detokenize_response(answer))
