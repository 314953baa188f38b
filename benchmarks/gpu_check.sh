#!/usr/bin/env bash
# The GPU check a maintainer with an NVIDIA GPU runs from the repository root:
#   1. make test-gpu: tests/test_gpu.py (fails, never skips, without a usable CUDA device);
#   2. the training-step timings of benchmarks/gpu_speed.py into docs/results/bench-gpu/.
# Each step has a time limit (TEST_TIMEOUT, BENCH_TIMEOUT seconds); the first failure stops
# the script with its status. Needs a CUDA build of torch in the venv (docs/guide/gpu.md).
set -euo pipefail

TEST_TIMEOUT="${TEST_TIMEOUT:-3600}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-1800}"
DEVICE="${DEVICE:-cuda}"
OUT="${OUT:-docs/results/bench-gpu}"
PY="${PY:-.venv/bin/python}"

cd "$(dirname "$0")/.."
echo "== make test-gpu (limit ${TEST_TIMEOUT} s)"
timeout "$TEST_TIMEOUT" make test-gpu
echo "== benchmarks.gpu_speed --device ${DEVICE} --out ${OUT} (limit ${BENCH_TIMEOUT} s)"
timeout "$BENCH_TIMEOUT" "$PY" -m benchmarks.gpu_speed --device "$DEVICE" --out "$OUT"
echo "== wrote ${OUT}/gpu_speed.md"
cat "${OUT}/gpu_speed.md"
