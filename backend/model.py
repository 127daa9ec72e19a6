"""Triton Python-based backend `vllm`: serves a vLLM engine through Triton, on vLLM's public API.

Triton calls `execute` on its own thread; every request is handed to an asyncio
loop running in a background thread, where the engine streams its outputs; a third
thread sends them back through the request's response sender (the model is decoupled).
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
from functools import partial  # noqa: E402
from typing import Any  # noqa: E402

import psutil  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

from vllm_backend.affinity import unconfined_thread  # noqa: E402
from vllm_backend.cancels import CancelWatch  # noqa: E402
from vllm_backend.chat import ChatError  # noqa: E402
from vllm_backend.compat import (  # noqa: E402  the only module that imports vLLM
    CLIENT_ERRORS,
    PROMPT_LOGPROBS,
    batch_limits,
    describe,
    engine_answers,
    engine_tokenizer,
    max_token_id,
    multimodal_prompt,
    start_engine,
    takes_images,
    token_prompt,
)
from vllm_backend.devices import engine_environment, ignored_device_ids  # noqa: E402
from vllm_backend.images import ImageError, decode_images, multi_modal_data  # noqa: E402
from vllm_backend.interface import INPUTS, OPTIONAL_OUTPUTS, OUTPUTS, SPARSE_OUTPUTS, TOKENIZE_ONLY  # noqa: E402
from vllm_backend.interface import missing_tensors  # noqa: E402
from vllm_backend.lora import LoraError, lora_table, resolve_lora  # noqa: E402
from vllm_backend.metrics import COUNTER, GAUGE, FamilySpec, MetricsSink, family_specs  # noqa: E402
from vllm_backend.metrics import stat_logger_factory  # noqa: E402
from vllm_backend.outbox import Outbox  # noqa: E402
from vllm_backend.outputs import OutputOptions, ResponseArrays, implied_sampling  # noqa: E402
from vllm_backend.params import BackendParams  # noqa: E402
from vllm_backend.prompts import check_length, read_prompt  # noqa: E402
from vllm_backend.reaper import Reaper  # noqa: E402
from vllm_backend.relay import Pacer, relay  # noqa: E402
from vllm_backend.request_fields import RequestError, flag, scalar, tensor  # noqa: E402
from vllm_backend.sampling import SamplingError, sampling_from_json  # noqa: E402
from vllm_backend.tokenization import TokenIdError, tokenize_only_arrays  # noqa: E402

# Starts every error message caused by the request itself (the client's fault).
INVALID_REQUEST_PREFIX = "invalid request: "
UNHEALTHY_MESSAGE = "Model is unavailable due to unhealthy vLLM engine"
HEALTHY_GAUGE = FamilySpec("vllm:engine_healthy", GAUGE, "1 while the vLLM engine passes its health checks.")


def _client_cause(exc: BaseException) -> BaseException | None:
    """The request's own error behind a wrapper such as vLLM's EngineGenerateError, if any."""
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, CLIENT_ERRORS):
            return cause
        cause = cause.__cause__
    return None


# Consecutive unanswered health checks (each waits at least 5 s) before a live engine counts as hung.
HUNG_AFTER_UNANSWERED = 3


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config: Any) -> Any:
        config = auto_complete_model_config.as_dict()
        for spec in missing_tensors(config.get("input", []), INPUTS):
            auto_complete_model_config.add_input(spec)
        for spec in missing_tensors(config.get("output", []), OUTPUTS):
            auto_complete_model_config.add_output(spec)
        auto_complete_model_config.set_max_batch_size(0)
        auto_complete_model_config.set_model_transaction_policy({"decoupled": True})
        return auto_complete_model_config

    # ---- life cycle -------------------------------------------------------------------------------

    def initialize(self, args: dict[str, Any]) -> None:
        self.logger = pb_utils.Logger
        self.model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(self.model_config):
            raise pb_utils.TritonModelException("the vllm backend needs a decoupled model transaction policy")
        self.model_name = args["model_name"]
        self.labels = {"model": self.model_name, "version": str(args["model_version"])}
        engine_json = os.path.join(args["model_repository"], args["model_version"], "model.json")
        with open(engine_json) as handle:
            self.engine_args = json.load(handle)
        self.params = BackendParams.from_config(self.model_config)
        # Devices before anything starts the engine: KIND_GPU / KIND_MODEL rules and GPU_DEVICE_IDS.
        kind = args.get("model_instance_kind", "")
        env = engine_environment(
            self.model_config,
            self.engine_args,
            kind,
            args.get("model_instance_device_id", "0"),
            os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
        warning = ignored_device_ids(self.model_config, kind)
        if warning:
            self.logger.log_warn(f"[vllm] {warning}")
        os.environ.update(env)
        self.lora = lora_table(self.engine_args, os.path.join(args["model_repository"], args["model_version"]))

        self.metric_families: list[Any] = []
        self.sink: MetricsSink | None = None
        self.healthy_gauge = None
        if self.params.report_custom_metrics and not self.engine_args.get("disable_log_stats", False):
            max_len = int(self.engine_args.get("max_model_len") or 0)
            specs = family_specs(max_len or 32768, per_token=self.params.report_time_per_output_token)
            self.sink = MetricsSink(self._make_metric, specs)
        if self.params.health_check:
            self.healthy_gauge = self._make_metric(HEALTHY_GAUGE)

        self.healthy = True
        self.stopping = False
        self.tasks: set[asyncio.Future] = set()
        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=self.loop.run_forever, name="vllm-backend-loop", daemon=True)
        self.loop_thread.start()
        self.outbox = Outbox(on_error=self.logger.log_error, threads=self.params.response_sender_threads)
        self.cancels = CancelWatch(
            self.params.cancel_check_interval_s, on_error=self.logger.log_error, on_info=self.logger.log_info
        )
        self.pacer = Pacer(
            self.loop,
            self.params.stream_responses_per_s,
            self.params.stream_pace_above,
            lambda: len(self.cancels.running),
        )
        self.reaper = Reaper()
        self.logger.log_info(f"[vllm] {describe()}")
        self.engine = self._run(self._start_engine())
        self.tokenizer = self._run(engine_tokenizer(self.engine))
        self._set_healthy(True)
        if self.params.health_check:
            self.health_task = asyncio.run_coroutine_threadsafe(self._watch_health(), self.loop)
        self.tasks.add(asyncio.run_coroutine_threadsafe(self.cancels.run(), self.loop))
        self.logger.log_info(f"[vllm] engine ready for {self.model_name}")

    def _make_metric(self, spec: FamilySpec) -> Any:
        kinds = {
            COUNTER: pb_utils.MetricFamily.COUNTER,
            GAUGE: pb_utils.MetricFamily.GAUGE,
            "histogram": pb_utils.MetricFamily.HISTOGRAM,
        }
        family = pb_utils.MetricFamily(name=spec.name, description=spec.description, kind=kinds[spec.kind])
        self.metric_families.append(family)  # a family must outlive its metrics
        if spec.buckets is not None:
            return family.Metric(labels=self.labels, buckets=list(spec.buckets))
        return family.Metric(labels=self.labels)

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def _start_engine(self) -> Any:
        loggers = [stat_logger_factory(self.sink)] if self.sink is not None else None
        with unconfined_thread():  # the engine's processes inherit this thread's cores
            engine, config = start_engine(self.engine_args, loggers)
        max_num_seqs, max_num_batched_tokens = batch_limits(config)
        self.logger.log_info(
            f"[vllm] batch limits: max_num_seqs {max_num_seqs}, max_num_batched_tokens {max_num_batched_tokens}"
            " (vllm serve's defaults for this device, unless model.json sets them)"
        )
        # The engine's processes are this stub's children (the reaper excepted): stop them if the stub dies.
        children = psutil.Process().children(recursive=True)
        self.reaper.guard([p for p in children if p.pid != self.reaper.process.pid])
        return engine

    def finalize(self) -> None:
        self.logger.log_info("[vllm] shutting down the engine")
        self.stopping = True
        for future in list(self.tasks):
            future.cancel()
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()
        if self.sink is not None:
            self.sink.close()
        self.reaper.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join(timeout=10)
        self.outbox.close()
        self._release_metrics()

    def _release_metrics(self) -> None:
        """Drops the Triton metrics now, metrics before their families, while the stub still runs: left to the
        interpreter's exit, a family's metrics clear themselves into shared memory already gone (a segfault)."""
        if self.sink is not None:
            self.sink.metrics.clear()
        self.healthy_gauge = None
        self.metric_families.clear()

    # ---- engine health ----------------------------------------------------------------------------

    def _set_healthy(self, healthy: bool) -> None:
        self.healthy = healthy
        if self.healthy_gauge is not None:
            self.healthy_gauge.set(1.0 if healthy else 0.0)

    async def _engine_alive(self) -> bool:
        """Dead engines report an error; hung ones do not answer a cheap call in time."""
        if self.engine.errored:
            return False
        try:
            await asyncio.wait_for(engine_answers(self.engine), timeout=max(5.0, 3 * self.params.health_check_interval_s))
        except Exception:
            return False
        return True

    async def _watch_health(self) -> None:
        unanswered = 0  # checks in a row the engine did not answer in time
        while not self.stopping:
            await asyncio.sleep(self.params.health_check_interval_s)
            if self.stopping or not self.healthy or await self._engine_alive():
                unanswered = 0
                continue
            # A dead engine is declared at once; a silent one only when it stays silent, so that an engine
            # starved of CPU for a few seconds on a loaded host is not taken for a hung one.
            unanswered += 1
            if not self.engine.errored and unanswered < HUNG_AFTER_UNANSWERED:
                continue
            self._set_healthy(False)
            self.logger.log_error("[vllm] the engine is not healthy")
            if self.params.restart_engine:
                await self._restart_engine()
            else:
                try:  # the stock behaviour: the model leaves the server
                    pb_utils.unload_model(self.model_name)
                except Exception as exc:
                    self.logger.log_error(f"[vllm] could not unload the model: {exc}")
                return

    async def _restart_engine(self) -> None:
        backoff = 1.0
        while not self.stopping:
            try:
                await self.loop.run_in_executor(None, self.engine.shutdown)
            except Exception as exc:
                self.logger.log_warn(f"[vllm] shutting down the dead engine failed: {exc}")
            try:
                self.engine = await self._start_engine()
                self.tokenizer = await engine_tokenizer(self.engine)
                self._set_healthy(True)
                self.logger.log_info("[vllm] engine restarted")
                return
            except Exception as exc:
                self.logger.log_error(f"[vllm] engine restart failed, next try in {backoff:.0f} s: {exc}")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.params.restart_max_backoff_s)

    # ---- requests ---------------------------------------------------------------------------------

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            if not self.healthy:  # answered here: the loop may be busy restarting the engine
                self._fail(request.get_response_sender(), UNHEALTHY_MESSAGE, pb_utils.TritonError.UNAVAILABLE)
                continue
            future = asyncio.run_coroutine_threadsafe(self._generate(request), self.loop)
            self.tasks.add(future)
            future.add_done_callback(self.tasks.discard)
        return None

    def _first_token(self, flags: dict[str, bool], prompt_ids: list[int]) -> str:
        """The first prompt token's text, when the prompt's logprobs are asked for (vLLM gives it none)."""
        if not flags["return_prompt_logprobs"]:
            return ""
        if not PROMPT_LOGPROBS:
            raise RequestError("this vLLM release cannot return the prompt's logprobs")
        return self.tokenizer.decode(prompt_ids[:1])

    def _parse(self, request: Any) -> tuple[Any, Any, Any, OutputOptions]:
        """The engine prompt, sampling parameters, LoRA request and output options of one request."""
        prompt, prompt_ids = read_prompt(request, self.tokenizer, max_token_id(self.tokenizer))
        images = tensor(request, "image")
        engine_prompt: Any
        if images is None:
            # Already tokenized, so rendered: vLLM takes it on the calling loop. A raw prompt would go
            # through its renderer's thread first, one more hand-over before the engine sees the request.
            engine_prompt = token_prompt(prompt_ids, prompt)
        else:  # images still need vLLM's multi-modal processing
            if not takes_images(self.engine.model_config):  # some releases' engines die of them (0.20)
                raise RequestError("this model takes no images: leave out the image input")
            engine_prompt = multimodal_prompt(prompt_ids, multi_modal_data(decode_images(images)))
        stream = flag(request, "stream")
        exclude = scalar(request, "exclude_input_in_output")
        if stream and exclude is not None and not bool(exclude):
            raise RequestError("streaming requires exclude_input_in_output to be true")
        flags = {name: flag(request, name) for name in (*OPTIONAL_OUTPUTS, SPARSE_OUTPUTS)}
        first_token = self._first_token(flags, prompt_ids)
        raw = scalar(request, "sampling_parameters")
        sampling = sampling_from_json(raw, request.parameters(), stream, implied_sampling(flags))
        lora = resolve_lora(sampling.lora_name, self.lora)
        params = sampling.params
        check_length(self.engine.model_config.max_model_len, len(prompt_ids), params.max_tokens)
        prepend = not stream and not (exclude is not None and bool(exclude))
        options = OutputOptions.from_flags(params.n, prompt if prepend else "", flags, params.logprobs, first_token)
        if options.logprobs_to_ask is not None:
            params.logprobs = options.logprobs_to_ask
        return engine_prompt, params, lora, options

    async def _generate(self, request: Any) -> None:
        sender = request.get_response_sender()
        request_id = f"{request.request_id() or 'triton'}-{uuid.uuid4().hex[:12]}"
        if not self.healthy:
            self._fail(sender, UNHEALTHY_MESSAGE, pb_utils.TritonError.UNAVAILABLE)
            return
        engine = self.engine
        try:
            try:
                if flag(request, TOKENIZE_ONLY):
                    self._answer_from_tokenizer(request, sender)
                    return
                engine_prompt, params, lora, options = self._parse(request)
            except (RequestError, SamplingError, ChatError, LoraError, ImageError, TokenIdError) as exc:
                self._fail(sender, str(exc), pb_utils.TritonError.INVALID_ARG)
                return
            self.cancels.add(request_id, sender.is_cancelled, partial(engine.abort, request_id))
            arrays = ResponseArrays(options)
            # A cancelled request ends here too: the watch's abort makes the engine yield a final output.
            outputs = engine.generate(engine_prompt, params, request_id, lora_request=lora)
            last = await relay(
                outputs,
                lambda output: self._response(arrays(output)),
                lambda response, on_sent: self.outbox.send(sender, response, on_sent=on_sent),
                self.loop,
                self.pacer.wait,
            )
            if sender.is_cancelled():
                await engine.abort(request_id)
                self.outbox.send(sender, None, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            elif last is not None:
                self.outbox.send(sender, last, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                self.outbox.send(sender, None, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except CLIENT_ERRORS as exc:  # vLLM's input validation (prompt too long, bad parameter, ...)
            await engine.abort(request_id)
            self._fail(sender, str(exc), pb_utils.TritonError.INVALID_ARG)
        except asyncio.CancelledError:
            await engine.abort(request_id)
            self._fail(sender, "request cancelled", pb_utils.TritonError.CANCELLED)
        except Exception as exc:  # an engine failure, unless vLLM wrapped the request's own error
            cause = _client_cause(exc)
            if cause is not None:
                self._fail(sender, str(cause), pb_utils.TritonError.INVALID_ARG)
                return
            self.logger.log_error(f"[vllm] request {request_id} failed: {exc!r}")
            if engine.errored:
                self._fail(sender, UNHEALTHY_MESSAGE, pb_utils.TritonError.UNAVAILABLE)
            else:
                await engine.abort(request_id)
                self._fail(sender, f"engine error: {exc}", pb_utils.TritonError.INTERNAL)
        finally:
            self.cancels.discard(request_id)

    def _answer_from_tokenizer(self, request: Any, sender: Any) -> None:
        """A tokenize-only request: its prompt read exactly as a generation reads it, the engine left alone."""
        text, ids = read_prompt(request, self.tokenizer, max_token_id(self.tokenizer))
        strs = self.tokenizer.convert_ids_to_tokens(ids) if flag(request, "return_token_strs") else None
        arrays = tokenize_only_arrays(text, ids, strs, self.engine.model_config.max_model_len)
        self.outbox.send(sender, self._response(arrays), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _response(self, arrays: dict[str, Any]) -> Any:
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
        self.outbox.send(
            sender,
            pb_utils.InferenceResponse(output_tensors=[], error=error),
            pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )
