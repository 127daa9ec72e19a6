"""Part 5: the stack against `vllm serve` and the engine alone on a CUDA host (`python -m bench --part5`)."""
