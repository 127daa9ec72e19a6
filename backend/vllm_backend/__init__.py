"""Pure building blocks of the vLLM backend, importable without Triton."""
