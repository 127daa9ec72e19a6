"""The gateway's only connection to Triton: one gRPC channel, shared by every request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from gateway.core.triton_codec import decode_response, encode_request
from gateway.core.upstream import GenerateChunk, GenerateRequest
from gateway.errors import OpenAIError
from gateway.model_map import ModelEntry

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


class UpstreamError(OpenAIError):
    """Triton refused or failed a request."""


def _rpc_error(exc: grpc.aio.AioRpcError) -> OpenAIError:
    code = exc.code()
    details = exc.details() or str(code)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return UpstreamError(503, f"Triton is unavailable: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return UpstreamError(504, "The request to Triton timed out.")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return UpstreamError(400, details)
    if code == grpc.StatusCode.NOT_FOUND:
        return UpstreamError(404, details)
    return UpstreamError(502, f"Triton error: {details}", type="upstream_error")


# The backend starts the message of every error caused by the request with this.
_INVALID_REQUEST_PREFIX = "invalid request: "


def stream_error(message: str) -> OpenAIError:
    """An error sent in the stream. The stream protocol carries no status code, so the
    backend marks the request's own errors in the message."""
    if message.startswith(_INVALID_REQUEST_PREFIX):
        return UpstreamError(400, message[len(_INVALID_REQUEST_PREFIX) :])
    lowered = message.lower()
    if "unavailable" in lowered or "unhealthy" in lowered:
        return UpstreamError(503, message)
    if "unknown model" in lowered or "not found" in lowered:
        return UpstreamError(404, message)
    return UpstreamError(502, message, type="upstream_error")


class TritonClient:
    def __init__(self, url: str, request_timeout_s: float, health_timeout_s: float) -> None:
        self.url = url
        self.request_timeout_s = request_timeout_s
        self.health_timeout_s = health_timeout_s
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

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """Streams one request's responses. Closing the iterator cancels the request in Triton."""
        if self._cut_error is not None:  # past the drain deadline: nothing new starts
            raise self._cut_error
        call = self._stream_infer(encode_request(request), timeout=self.request_timeout_s)
        completed = False
        self._open_calls.add(call)
        try:
            # Read to the stream's end: Triton closes it after the final response. Cancelling a
            # finished call instead would leave Triton holding the request's state.
            # read() rather than `async for`: one async generator less per message.
            while (response := await call.read()) is not grpc.aio.EOF:
                if response.error_message:
                    raise stream_error(response.error_message)
                yield decode_response(response.infer_response)
            completed = True
        except grpc.aio.AioRpcError as exc:
            raise (self._cut_error if self._was_cut() else _rpc_error(exc)) from None
        except asyncio.CancelledError:
            if self._was_cut():  # its call was cancelled, not its task: the readers get the cut's error
                raise self._cut_error from None
            raise
        finally:
            self._open_calls.discard(call)
            if not completed:  # an error, or the client went away: stop the request in Triton
                call.cancel()

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
