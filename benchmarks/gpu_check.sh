#!/usr/bin/env bash
# The GPU check a maintainer with an NVIDIA GPU runs from the repository root:
#   1. the GPU tests (what `make test-gpu` runs: pytest -m gpu, tests/test_gpu.py), which
#      fail, never skip, without a usable CUDA device;
#   2. the dense and SVBNN training-step timings of benchmarks/gpu_speed.py into
#      docs/results/bench-gpu/.
# Each step has a time limit (TEST_TIMEOUT, BENCH_TIMEOUT seconds); the first failure stops
# the script with its status. PY is a Python with a CUDA build of torch and svbnn's
# dependencies: the project's venv by default (docs/guide/gpu.md), or, with PY=python3 on
# a machine whose Python already has them, the sources in place (PYTHONPATH=src).
set -euo pipefail

TEST_TIMEOUT="${TEST_TIMEOUT:-3600}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-1800}"
DEVICE="${DEVICE:-cuda}"
OUT="${OUT:-docs/results/bench-gpu}"
PY="${PY:-.venv/bin/python}"
BENCH_ARGS="${BENCH_ARGS:-}"

cd "$(dirname "$0")/.."
export PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
echo "== pytest -m gpu (limit ${TEST_TIMEOUT} s)"
timeout "$TEST_TIMEOUT" "$PY" -m pytest -q -m gpu -p no:cacheprovider --durations=10 tests/test_gpu.py
echo "== benchmarks.gpu_speed --device ${DEVICE} --out ${OUT} ${BENCH_ARGS} (limit ${BENCH_TIMEOUT} s)"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of options
timeout "$BENCH_TIMEOUT" "$PY" -m benchmarks.gpu_speed --device "$DEVICE" --out "$OUT" $BENCH_ARGS
echo "== wrote ${OUT}/gpu_speed.md"
cat "${OUT}/gpu_speed.md"
