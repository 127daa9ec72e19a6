"""A Triton Python-backend model that answers like our vLLM backend at no cost: `max_tokens` one-word
deltas sent at once (or `TOKEN_DELAY_S` apart), the last with finish_reason "length".

Copied by bench.fake_upstream into a test repository as `<model>/1/model.py`; it runs inside Triton's
Python stub, so it imports nothing from this project.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

WORD = b" word"
_FLAGS = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens", "sparse_outputs")


def _scalar(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    array = tensor.as_numpy()
    return array.reshape(-1)[0] if array.size else None


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        parameter = config.get("parameters", {}).get("TOKEN_DELAY_S", {})
        self.delay_s = float(parameter.get("string_value") or 0)
        # Tensors that never change, made once so each response costs only its send.
        self.word = np.array([WORD], dtype=np.object_)
        self.none = np.array([b"None"], dtype=np.object_)
        self.length = np.array([b"length"], dtype=np.object_)
        self.one = np.array([1], dtype=np.uint32)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fake-model-loop", daemon=True)
        self.thread.start()

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            asyncio.run_coroutine_threadsafe(self._answer(request), self.loop)
        return None

    def finalize(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)

    def _response(self, request_flags: dict[str, bool], text: Any, reason: Any, count: Any, prompt_len: int) -> Any:
        tensors = [pb_utils.Tensor("text_output", text)]
        if request_flags["sparse_outputs"] and reason is self.none:  # as our backend: text only until the end
            return pb_utils.InferenceResponse(output_tensors=tensors)
        if request_flags["return_finish_reason"]:
            tensors.append(pb_utils.Tensor("finish_reason", reason))
        if request_flags["return_num_input_tokens"]:
            tensors.append(pb_utils.Tensor("num_input_tokens", np.array([prompt_len], dtype=np.uint32)))
        if request_flags["return_num_output_tokens"]:
            tensors.append(pb_utils.Tensor("num_output_tokens", count))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    async def _answer(self, request: Any) -> None:
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            sampling = json.loads(_scalar(request, "sampling_parameters") or b"{}")
            max_tokens = int(sampling.get("max_tokens") or 16)
            prompt = _scalar(request, "text_input") or _scalar(request, "messages") or b""
            prompt_len = len(prompt.split())
            flags = {flag: bool(_scalar(request, flag)) for flag in _FLAGS}
            if not _scalar(request, "stream"):
                text = np.array([WORD * max_tokens], dtype=np.object_)
                count = np.array([max_tokens], dtype=np.uint32)
                sender.send(self._response(flags, text, self.length, count, prompt_len), flags=final)
                return
            for i in range(max_tokens - 1):
                # is_cancelled() is a round trip to Triton: asked now and then, not per token.
                if i % 32 == 31 and sender.is_cancelled():
                    sender.send(flags=final)
                    return
                sender.send(self._response(flags, self.word, self.none, self.one, prompt_len))
                await asyncio.sleep(self.delay_s)  # 0 still lets the other streams interleave
            last_count = np.array([max_tokens if flags["sparse_outputs"] else 1], dtype=np.uint32)
            sender.send(self._response(flags, self.word, self.length, last_count, prompt_len), flags=final)
        except Exception as exc:  # the client must hear of any failure
            error = pb_utils.TritonError(f"fake model error: {exc}")
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=error), flags=final)
