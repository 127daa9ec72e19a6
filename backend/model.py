"""Triton Python-based backend `vllm`: serves a vLLM engine through Triton, on vLLM's public API.

Triton calls `execute` on its own thread; every request is handed to an asyncio
loop running in a background thread, where the engine streams its outputs back
through the request's response sender (the model is decoupled).
"""

from __future__ import annotations

import locale

# The stub runs in the C locale; vLLM and torch read files as UTF-8 on import.
locale.setlocale(locale.LC_ALL, "C.UTF-8")

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
import uuid  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402
from vllm import AsyncEngineArgs  # noqa: E402
from vllm.engine.async_llm_engine import AsyncLLMEngine  # noqa: E402

from vllm_backend.errors import CLIENT_ERRORS  # noqa: E402
from vllm_backend.chat import ChatError, parse_messages, parse_template_kwargs, render_chat  # noqa: E402
from vllm_backend.interface import INPUTS, OPTIONAL_OUTPUTS, OUTPUTS, missing_tensors  # noqa: E402
from vllm_backend.outputs import OutputOptions, output_arrays  # noqa: E402
from vllm_backend.sampling import SamplingError, sampling_from_json  # noqa: E402

_CANCEL_POLL_S = 0.05
# Starts every error message caused by the request itself (the client's fault).
INVALID_REQUEST_PREFIX = "invalid request: "


class RequestError(ValueError):
    """A request the backend refuses; the message is returned to the client."""


def _tensor(request: Any, name: str) -> np.ndarray | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _scalar(request: Any, name: str) -> Any:
    array = _tensor(request, name)
    if array is None or array.size == 0:
        return None
    return array.reshape(-1)[0]


def _flag(request: Any, name: str, default: bool = False) -> bool:
    value = _scalar(request, name)
    return default if value is None else bool(value)


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config: Any) -> Any:
        config = auto_complete_model_config.as_dict()
        for tensor in missing_tensors(config.get("input", []), INPUTS):
            auto_complete_model_config.add_input(tensor)
        for tensor in missing_tensors(config.get("output", []), OUTPUTS):
            auto_complete_model_config.add_output(tensor)
        auto_complete_model_config.set_max_batch_size(0)
        auto_complete_model_config.set_model_transaction_policy({"decoupled": True})
        return auto_complete_model_config

    def initialize(self, args: dict[str, Any]) -> None:
        self.logger = pb_utils.Logger
        self.model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(self.model_config):
            raise pb_utils.TritonModelException("the vllm backend needs a decoupled model transaction policy")
        engine_json = os.path.join(args["model_repository"], args["model_version"], "model.json")
        with open(engine_json) as handle:
            self.engine_args = json.load(handle)

        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=self.loop.run_forever, name="vllm-backend-loop", daemon=True)
        self.loop_thread.start()
        self.engine = self._run(self._start_engine())
        self.tokenizer = self.engine.get_tokenizer()
        self.tasks: set[asyncio.Future] = set()
        self.logger.log_info(f"[vllm] engine ready for {args['model_name']}")

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def _start_engine(self) -> AsyncLLMEngine:
        return AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**self.engine_args))

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            future = asyncio.run_coroutine_threadsafe(self._generate(request), self.loop)
            self.tasks.add(future)
            future.add_done_callback(self.tasks.discard)
        return None

    def _prompt(self, request: Any) -> str:
        text = _scalar(request, "text_input")
        messages = _scalar(request, "messages")
        if messages is not None:
            if text is not None:
                raise RequestError("give either text_input or messages, not both")
            kwargs = parse_template_kwargs(_scalar(request, "chat_template_kwargs"))
            return render_chat(self.tokenizer, parse_messages(messages), kwargs)
        if text is None:
            raise RequestError("text_input is required (or messages, for a chat)")
        return text.decode() if isinstance(text, bytes) else str(text)

    def _parse(self, request: Any) -> tuple[str, Any, OutputOptions, bool]:
        if _tensor(request, "image") is not None:
            raise RequestError("the image input is not supported by this backend version")
        prompt = self._prompt(request)
        stream = _flag(request, "stream")
        exclude = _scalar(request, "exclude_input_in_output")
        if stream and exclude is not None and not bool(exclude):
            raise RequestError("streaming requires exclude_input_in_output to be true")
        raw = _scalar(request, "sampling_parameters")
        sampling = sampling_from_json(raw, request.parameters(), stream)
        if sampling.lora_name is not None:
            raise RequestError("LoRA feature is not enabled.")
        flags = {flag: _flag(request, flag) for flag in OPTIONAL_OUTPUTS}
        prepend = not stream and not (exclude is not None and bool(exclude))
        options = OutputOptions.from_flags(sampling.params.n, prepend, flags)
        return prompt, sampling.params, options, stream

    async def _generate(self, request: Any) -> None:
        sender = request.get_response_sender()
        request_id = f"{request.request_id() or 'triton'}-{uuid.uuid4().hex[:12]}"
        watcher = None
        try:
            try:
                prompt, params, options, _ = self._parse(request)
            except (RequestError, SamplingError, ChatError) as exc:
                self._fail(sender, str(exc), pb_utils.TritonError.INVALID_ARG)
                return
            watcher = asyncio.ensure_future(self._abort_when_cancelled(sender, request_id))
            last = None
            async for output in self.engine.generate({"prompt": prompt}, params, request_id):
                if sender.is_cancelled():
                    break
                response = self._response(output, options)
                if output.finished:
                    last = response
                    break
                sender.send(response)
            if sender.is_cancelled():
                await self.engine.abort(request_id)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            elif last is not None:
                sender.send(last, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except CLIENT_ERRORS as exc:  # vLLM's input validation (prompt too long, bad parameter, ...)
            await self.engine.abort(request_id)
            self._fail(sender, str(exc), pb_utils.TritonError.INVALID_ARG)
        except asyncio.CancelledError:
            await self.engine.abort(request_id)
            self._fail(sender, "request cancelled", pb_utils.TritonError.CANCELLED)
        except Exception as exc:  # anything else is an engine failure; the client must hear of it
            self.logger.log_error(f"[vllm] request {request_id} failed: {exc!r}")
            await self.engine.abort(request_id)
            self._fail(sender, f"engine error: {exc}", pb_utils.TritonError.INTERNAL)
        finally:
            if watcher is not None:
                watcher.cancel()

    async def _abort_when_cancelled(self, sender: Any, request_id: str) -> None:
        """Aborts at once when Triton cancels the request, even between engine outputs."""
        while not sender.is_cancelled():
            await asyncio.sleep(_CANCEL_POLL_S)
        await self.engine.abort(request_id)

    def _response(self, output: Any, options: OutputOptions) -> Any:
        arrays = output_arrays(output, options)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in arrays.items()])

    def _fail(self, sender: Any, message: str, code: Any) -> None:
        """Ends the request with an error. gRPC streams carry no status code, so the
        message itself says whose fault it is: the request's, or the engine's."""
        if code == pb_utils.TritonError.INVALID_ARG:
            message = f"{INVALID_REQUEST_PREFIX}{message}"
        try:
            error = pb_utils.TritonError(message, code)
        except TypeError:  # older stubs take no code
            error = pb_utils.TritonError(message)
        sender.send(
            pb_utils.InferenceResponse(output_tensors=[], error=error),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )

    def finalize(self) -> None:
        self.logger.log_info("[vllm] shutting down the engine")
        for future in list(self.tasks):
            future.cancel()
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join(timeout=10)
