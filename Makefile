# Two commands do all the setup: `make demo` (the main job) and `make test` (setup + tests).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: install demo lint test gpu-test clean

install: $(VENV)/.installed

# constraints.txt pins the CPU build of torch; see README for the GPU install.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,ray]"
	$(BIN)/python -m pip install -q --no-deps -c constraints.txt flashinfer-bench
	touch $@

# Optimize the bundled rmsnorm task offline: the tuner policy when no LLM endpoint is configured,
# the CPU Triton interpreter when no GPU is visible.
demo: install
	$(BIN)/accelopt optimize evals/tasks/rmsnorm --beams 2 --plans 2 --samples 1 --iterations 2

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# CI runs this: the linter, then the CPU tests, two at a time (most of a test's wall time is
# waiting on processes it started: judges, servers, the CLI), a test file to a worker.
test: lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

gpu-test: install
	$(BIN)/python -m pytest -q -m gpu

clean:
	rm -rf $(VENV) runs .pytest_cache
