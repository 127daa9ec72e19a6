# The two commands: `make up` runs the product, `make test` runs the tests.
# Both install whatever is missing first (scripts/install.sh is idempotent).
VENV   ?= .venv
PYTHON := $(VENV)/bin/python
PORT   ?= 9000

.PHONY: install up test unit fuzz bench soak overload clean

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
# BENCH_ARGS="--part2" runs one part; "--part3" (not in the default run) the GPU token rates on the fast model.
bench: install
	@$(PYTHON) -m bench $(BENCH_ARGS)

# The soak (issue 23): 128 clients on the fast model for SOAK_SECONDS (10 minutes), through an engine kill and a
# Triton restart, on a stack of its own; prints a summary table and fails if any request ended neither complete
# nor with an explicit error, or if queues, processes, memory, descriptors or tasks are left behind.
SOAK_SECONDS ?= 600
soak: install
	@SOAK_SECONDS=$(SOAK_SECONDS) $(PYTHON) -m bench.soak

# Overload (issue 23): bursts at four times a gateway's capacity (GATEWAY_MAX_IN_FLIGHT 8, GATEWAY_MAX_QUEUED 8)
# on a fast stack of its own; prints the refusal and liveness latencies against their targets, and fails if a
# request ended neither complete nor refused with Retry-After, or if anything stays held afterwards.
overload: install
	@$(PYTHON) -m bench.overload

clean:
	rm -rf .run .pytest_cache
