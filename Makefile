# svbnn: every target installs what it needs into a local virtual environment first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Real data live beside the checkout in ../shared/data when present; the library never
# assumes it (loaders take a directory or SVBNN_DATA).
SHARED_DATA := $(abspath ../shared/data)
ifneq ($(wildcard $(SHARED_DATA)/SHA256SUMS),)
export SVBNN_DATA ?= $(SHARED_DATA)
endif
THREADS ?= 2
# The venv's programs first (the ninja that pip installed, for torch's extension builds).
VENV_PATH := PATH="$(abspath $(VENV))/bin:$$PATH"
# pytest's worker processes (pytest-xdist): one per core, at most 4 (each holds a torch and
# compiles its own kernels). The suite runs one torch thread a process (tests/conftest.py).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)

.PHONY: install demo docs test lint typecheck pytest test-slow test-gpu bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch first (an unpinned torch would pull a multi-GB CUDA build).
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,docs]'
	# svbnn's native loops, built with torch.utils.cpp_extension into the package with their
	# SHA-256 (SECURITY.md); without a C++ compiler svbnn runs torch's kernels instead.
	$(VENV_PATH) $(PY) -m svbnn._engine.native || true
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/svbnn demo

# The documentation site into site/ (open site/index.html); warnings are errors.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests examples $(wildcard benchmarks)
	$(VENV)/bin/ruff format --check src tests examples $(wildcard benchmarks)

typecheck: $(STAMP)
	$(VENV)/bin/mypy src

pytest: $(STAMP)
	$(VENV_PATH) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

test: lint typecheck docs pytest

test-slow: $(STAMP)
	$(VENV_PATH) $(PY) -m pytest -q -m slow

# The CUDA checks (tests/test_gpu.py), on a machine with an NVIDIA GPU and a CUDA build of
# torch in the venv (a wheel from https://download.pytorch.org/whl/ that matches the driver;
# see docs/guide/gpu.md). Without a usable CUDA device this FAILS and says why: it never
# passes by skipping. benchmarks/gpu_check.sh runs it and then the GPU benchmark.
test-gpu: $(STAMP)
	$(PY) -m pytest -q -m gpu

bench: $(STAMP)
	$(PY) -m benchmarks.run --kernels auto

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
