"""Side-by-side benchmarks: the gateway end to end against `vllm serve` and bare Triton, and the
gateway's own CPU cost against a bare ASGI server. `python -m bench --help` lists the parts."""
