"""The gateway's only connection to Triton: one gRPC channel, shared by every request."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
from prometheus_client import CollectorRegistry
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from gateway.core.triton_codec import decode_response, decode_tokenizer_answer, encode_request, encode_tokenizer_call
from gateway.core.upstream import GenerateChunk, GenerateRequest, TokenizerAnswer, TokenizerCall
from gateway.errors import OpenAIError
from gateway.model_map import ModelEntry
from gateway.observability.upstream_metrics import UpstreamMetrics
from gateway.resilience.breaker import BreakerBoard, CircuitBreaker
from gateway.resilience.deadlines import DeadlineKind, DeadlineWatch, StreamDeadlines

# Allow large prompts and outputs; Triton's own default limit is far above gRPC's 4 MB.
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.keepalive_time_ms", 30_000),
    # Reconnect quickly after Triton restarts: gRPC's default backoff grows to two minutes.
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]

# Triton's streaming method, called as unary-stream: the gateway sends one request per stream, and the
# wire format is the same. gRPC then sends the request's metadata, message and half-close in one batch,
# instead of a task feeding a request iterator through three sequential operations.
_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
ERROR_END_S = 2.0  # how long a stream may take to end by itself after its error response


@dataclass(slots=True)
class _Outcome:
    """How one stream ended, for its metrics and its model's circuit breaker."""

    model: str
    code: str | None = None  # the final gRPC status name; None while open or when the gateway ended it
    answered: bool = False  # Triton sent at least one response
    deadline: DeadlineKind | None = None
    in_stream_error: OpenAIError | None = None
    ended: bool = False  # after an error in the stream, Triton closed it by itself: no cancel needed


class UpstreamError(OpenAIError):
    """Triton refused or failed a request. `retryable`: the replica could not take it (unreachable, its engine
    unavailable, its breaker open, the model gone from it), so another replica may, as long as nothing was sent to
    the client yet."""

    def __init__(self, status: int, message: str, *, retryable: bool = False, **fields: object) -> None:
        super().__init__(status, message, **fields)  # type: ignore[arg-type]
        self.retryable = retryable


# The backend starts the message of every error caused by the request with this.
_INVALID_REQUEST_PREFIX = "invalid request: "


def _without_prefix(details: str) -> str:
    return details[len(_INVALID_REQUEST_PREFIX) :] if details.startswith(_INVALID_REQUEST_PREFIX) else details


def _rpc_error(exc: grpc.aio.AioRpcError) -> OpenAIError:
    code = exc.code()
    details = exc.details() or str(code)
    if code == grpc.StatusCode.UNAVAILABLE:
        return UpstreamError(503, f"Triton is unavailable: {details}", retryable=True)
    if code == grpc.StatusCode.CANCELLED:
        return UpstreamError(503, f"Triton is unavailable: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return UpstreamError(504, "The request to Triton timed out.", code="request_timeout")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return UpstreamError(400, _without_prefix(details))
    if code == grpc.StatusCode.NOT_FOUND:
        return UpstreamError(404, details, retryable=True)  # see stream_error
    return UpstreamError(502, f"Triton error: {details}", type="upstream_error")


# Words of the stream errors by which a replica says that it cannot take the request, whatever it is: its engine
# is down, or its Triton is stopping (SIGTERM's drain refuses new requests until the gateway sees the replica
# unready: "Server is stopping, scheduler for model has stopped accepting new inference requests").
_REPLICA_CANNOT_TAKE_IT = ("unavailable", "unhealthy", "server is stopping", "stopped accepting")


def stream_error(message: str) -> OpenAIError:
    """An error sent in the stream, by a Triton that does not end streams with a status code: the backend
    marks the request's own errors in the message."""
    if message.startswith(_INVALID_REQUEST_PREFIX):
        return UpstreamError(400, _without_prefix(message))
    lowered = message.lower()
    if any(marker in lowered for marker in _REPLICA_CANNOT_TAKE_IT):
        return UpstreamError(503, message, retryable=True)
    if "unknown model" in lowered or "not found" in lowered:
        # Retryable: the gateway sends a model only to a replica that listed it READY, so this one has just lost
        # it (a drain unloads every model at once, an unload one) and another replica may still serve it.
        return UpstreamError(404, message, retryable=True)
    return UpstreamError(502, message, type="upstream_error")


_DEADLINE_SETTINGS = {"first_token": "GATEWAY_FIRST_TOKEN_TIMEOUT_S", "stall": "GATEWAY_STALL_TIMEOUT_S"}


def deadline_error(kind: DeadlineKind) -> OpenAIError:
    what = "first response" if kind == "first_token" else "next response"
    return UpstreamError(
        504, f"The model sent no {what} in time ({_DEADLINE_SETTINGS[kind]}).", code=f"{kind}_timeout"
    )


def _retrieve(task: asyncio.Task) -> None:
    """Marks a read's outcome seen, so that asyncio does not log an unretrieved exception."""
    if not task.cancelled():
        task.exception()


async def _read_uncancelled(call: grpc.aio.UnaryStreamCall) -> object:
    """The call's next message, read in a task of its own that is never cancelled.

    Cancelling a task while it awaits grpc.aio's `read()` leaks native memory in grpcio (1.85; grpc/grpc#43360):
    a soak in which clients leave mid-stream grew the gateway's RSS without bound. So when the reader is
    cancelled (its client left), the call is cancelled instead, which ends the pending read cleanly.
    """
    read = asyncio.ensure_future(call.read())
    try:
        return await asyncio.shield(read)
    except asyncio.CancelledError:
        if not read.done():
            call.cancel()
            read.add_done_callback(_retrieve)
        raise


async def _read_to_end(call: grpc.aio.UnaryStreamCall) -> bool:
    """Whether the call ended by itself within ERROR_END_S, what follows its error read and dropped. Triton ends a
    stream right after an error response; cancelling it meanwhile, while Triton writes the end, can deadlock
    Triton 2.51's gRPC frontend (the local stack's; docs/local-stack.md)."""
    async def drain() -> None:
        while await _read_uncancelled(call) is not grpc.aio.EOF:
            pass

    try:
        await asyncio.wait_for(drain(), ERROR_END_S)
    except (asyncio.TimeoutError, grpc.aio.AioRpcError):
        return False
    return True


class TritonClient:
    def __init__(
        self,
        url: str,
        request_timeout_s: float,
        health_timeout_s: float,
        *,
        deadlines: StreamDeadlines = StreamDeadlines(),
        breakers: BreakerBoard | None = None,
        metrics: UpstreamMetrics | None = None,
        grpc_status_codes: bool = False,
    ) -> None:
        self.url = url
        self.request_timeout_s = request_timeout_s
        self.health_timeout_s = health_timeout_s
        self.deadlines = deadlines
        self.breakers = breakers or BreakerBoard(failures_to_open=0, cooldown_s=0)
        self.metrics = metrics or UpstreamMetrics(CollectorRegistry())
        # Triton (24.08 and later) then ends a failed stream with the error's gRPC status code instead of
        # an error message in the stream; older ones ignore the header.
        self._metadata = (("triton_grpc_error", "true"),) if grpc_status_codes else None
        self._channel = grpc.aio.insecure_channel(url, options=_CHANNEL_OPTIONS)
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)
        self._stream_infer = self._channel.unary_stream(
            _STREAM_INFER,
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelStreamInferResponse.FromString,
            _registered_method=True,
        )
        # The drain's cut (gateway/drain/): the streams open now, and the error they end with once cut.
        self._open_calls: set[grpc.aio.UnaryStreamCall] = set()
        self._cut_error: OpenAIError | None = None

    def cut_streams(self, error: OpenAIError) -> int:
        """Ends every open generation with `error`, cancelling its request in Triton; returns how many."""
        self._cut_error = error
        calls = list(self._open_calls)
        for call in calls:
            call.cancel()
        return len(calls)

    def _was_cut(self) -> bool:
        task = asyncio.current_task()
        return self._cut_error is not None and not (task is not None and task.cancelling())

    async def close(self) -> None:
        await self._channel.close()

    def _admit(self, model: str) -> CircuitBreaker | None:
        """The model's breaker, or a 503 at once while it is open."""
        if not self.breakers.enabled:
            return None
        breaker = self.breakers.for_model(model)
        wait_s = breaker.admit()
        if wait_s is not None:
            self.metrics.breaker_rejections.labels(model).inc()
            raise UpstreamError(
                503,
                f"Triton is unavailable for `{model}`: failing fast after repeated errors; retry later.",
                code="circuit_open",
                headers={"Retry-After": str(max(1, math.ceil(wait_s)))},
                retryable=True,
            )
        return breaker

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """Streams one request's responses. Closing the iterator cancels the request in Triton, and so does
        a deadline."""
        if self._cut_error is not None:  # past the drain deadline: nothing new starts
            raise self._cut_error
        breaker = self._admit(request.model)
        call = self._stream_infer(encode_request(request), timeout=self.request_timeout_s, metadata=self._metadata)
        watch = None
        if self.deadlines.enabled and request.stream:  # unstreamed, Triton's only response is the last one
            watch = DeadlineWatch(self.deadlines, asyncio.get_running_loop(), lambda _kind: call.cancel())
        outcome = _Outcome(request.model)
        self._open_calls.add(call)
        try:
            # Read to the stream's end: Triton closes it after the final response. Cancelling a
            # finished call instead would leave Triton holding the request's state.
            while (response := await _read_uncancelled(call)) is not grpc.aio.EOF:
                if watch is not None:
                    watch.on_response()
                if response.error_message:
                    outcome.ended = await _read_to_end(call)
                    raise stream_error(response.error_message)
                if not outcome.answered:  # Triton is reachable: a half-open breaker closes without waiting
                    outcome.answered = True
                    if breaker is not None:
                        breaker.record_reachable()
                yield decode_response(response.infer_response)
            outcome.code = "OK"
        except grpc.aio.AioRpcError as exc:
            outcome.code = exc.code().name
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                outcome.deadline = "total"
            raise (self._cut_error if self._was_cut() else _rpc_error(exc)) from None
        except OpenAIError as exc:  # an error message in the stream
            outcome.code, outcome.in_stream_error = "UNKNOWN", exc
            raise
        except asyncio.CancelledError:
            if self._was_cut():  # its call was cancelled, not its task: the readers get the cut's error
                raise self._cut_error from None
            task = asyncio.current_task()
            if watch is not None and watch.fired is not None and (task is None or not task.cancelling()):
                outcome.deadline = watch.fired
                raise deadline_error(watch.fired) from None
            raise
        finally:
            self._open_calls.discard(call)
            if watch is not None:
                watch.stop()
            if outcome.code is None or (outcome.in_stream_error is not None and not outcome.ended):
                call.cancel()  # a deadline, an error, or the reader went away: stop the request in Triton
            self._report(outcome, breaker)

    def _report(self, outcome: _Outcome, breaker: CircuitBreaker | None) -> None:
        """Once per stream: its status, deadline and cancellation in the metrics, its verdict to the breaker."""
        m, model = self.metrics, outcome.model
        m.statuses.labels(model, outcome.code or "CANCELLED").inc()
        if outcome.deadline is not None:
            m.deadlines.labels(model, outcome.deadline).inc()
        if outcome.code is None or outcome.in_stream_error is not None or outcome.deadline is not None:
            reason = "deadline" if outcome.deadline else "error" if outcome.in_stream_error else "closed"
            m.cancellations.labels(model, reason).inc()
        if breaker is None:
            return
        unavailable = outcome.code == "UNAVAILABLE" or (
            outcome.in_stream_error is not None and outcome.in_stream_error.status == 503
        )
        if unavailable:
            breaker.record_unavailable()
        elif outcome.code is not None and outcome.deadline is None:
            breaker.record_success()  # Triton answered with a status other than UNAVAILABLE
        else:
            breaker.record_abandoned()  # no verdict: a deadline, or the reader went away

    async def tokenize_only(self, call: TokenizerCall, timeout_s: float) -> TokenizerAnswer:
        """The backend's answer from the model's tokenizer. One response, no engine work: no breaker, deadlines or
        stream metrics, which describe generations."""
        if self._cut_error is not None:
            raise self._cut_error
        stream = self._stream_infer(encode_tokenizer_call(call), timeout=timeout_s, metadata=self._metadata)
        answer: TokenizerAnswer | None = None
        ended = False
        try:
            while (response := await _read_uncancelled(stream)) is not grpc.aio.EOF:
                if response.error_message:
                    ended = await _read_to_end(stream)
                    raise stream_error(response.error_message)
                answer = decode_tokenizer_answer(response.infer_response) or answer
            ended = True
        except grpc.aio.AioRpcError as exc:
            ended = True
            raise _rpc_error(exc) from None
        finally:
            if not ended:  # the caller went away, or the stream did not end after its error: stop it in Triton
                stream.cancel()
        if answer is None:
            message = f"`{call.model}` answered a tokenize request without tokens."
            raise UpstreamError(502, message, type="upstream_error")
        return answer

    async def server_ready(self) -> bool:
        try:
            reply = await self._stub.ServerReady(pb.ServerReadyRequest(), timeout=self.health_timeout_s)
            return reply.ready
        except grpc.aio.AioRpcError:
            return False

    async def repository_index(self) -> list[ModelEntry]:
        """Every model in Triton's repository and its state. Called by the model map, never per request."""
        try:
            reply = await self._stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=self.health_timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise _rpc_error(exc) from None
        return [ModelEntry(m.name, m.version, m.state) for m in reply.models]
