#!/usr/bin/env bash
# Profiles A's stub and gateway on the GPU host while part 5 measures A alone (bench/results/part5-profile.md).
# Run from the checkout there, after the host's install.sh; carry .gpu/tok, .gpu/tools (the py-spy wheel) with it.
#
# Usage: bash scripts/gpu_profile.sh [extra part 5 arguments, e.g. --backend-param RESPONSE_SENDER_THREADS=2]
# Settings: SHAPE=8b, STREAMS=256, PROMPTS_PER_STREAM=8. Writes $OUT/profile.tgz (one file: the host returns few).
set -u
export PYTHONUNBUFFERED=1
command -v py-spy >/dev/null || python3 -m pip install -q --no-index --no-deps .gpu/tools/py_spy-*.whl 2>&1 | grep -vi warning
work=/tmp/gpu-profile; rm -rf "$work"; mkdir -p "$work/out"; out=$work/out
timeout -s INT 400 python3 -m bench --part5 --tokenizer .gpu/tok --systems A --shapes "${SHAPE:-8b}" \
  --concurrency "${STREAMS:-256}" --prompts-per-concurrency "${PROMPTS_PER_STREAM:-8}" --out-dir "$work/part5" "$@" \
  > "$out/part5.log" 2>&1 &
bench=$!
# Part 5 starts the stack, then `vllm bench serve` (bench.vllm_bench); the profile starts 12 s into the load.
for _ in $(seq 1 300); do pgrep -f bench.vllm_bench >/dev/null && break; sleep 1; done
sleep 12
stub=$(pgrep -f triton_python_backend_stub | head -1)
gateway=$(pgrep -f "python3 -m gateway" | head -1)
[ -n "$stub" ] && [ -n "$gateway" ] || { echo "gpu_profile: no stub or gateway running" >&2; kill -INT $bench; exit 2; }
py-spy dump --pid "$stub" > "$out/stub-dump.txt" 2>&1
py-spy record --pid "$stub" --duration 12 --rate 200 --format raw --idle -o "$out/stub.txt" > /dev/null 2>&1 &
py-spy record --pid "$gateway" --duration 12 --rate 200 --format raw -o "$out/gateway.txt" > /dev/null 2>&1 &
sleep 3
top -b -n 1 -H -p "$stub" | head -30 > "$out/top-stub-threads.txt"
top -b -n 1 | head -30 > "$out/top.txt"
wait %2 %3 2>/dev/null
wait $bench; echo "part 5 exited $?"
cp "$work/part5/part5.md" "$out/" 2>/dev/null && grep -a "^| .* | A |" "$out/part5.md"
tar czf "${OUT:-$work}/profile.tgz" -C "$work" out
