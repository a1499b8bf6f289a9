# Two commands do all the setup: `make demo` (the main job: installs only what the CLI needs) and
# `make test` (the full install, then lint and tests).
PYTHON ?= python3
TEST_WORKERS ?= 2
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: install runtime demo lint test gpu-test clean

# Two installs into one venv. `runtime`: accelopt and what it imports (torch, Triton, LangGraph,
# Chroma, the embedder): all `make demo` needs. `install`: that, plus the `dev` extra (pytest,
# ruff, mypy, langgraph-cli), the `ray` extra and flashinfer-bench: what `make lint`/`make test`
# need (a fresh clone's .venv: 3.0 GB after `make demo`, 3.4 GB after `make test`; ray alone is
# 0.25 GB). Either works from a fresh clone; `make test` after `make demo` adds only the difference.
runtime: $(VENV)/.installed-runtime
install: $(VENV)/.installed

# constraints.txt pins the CPU build of torch; see README for the GPU install. pip byte-compiles
# what it installs one file at a time; compileall does it on every core (torch alone: 22 s -> 11 s
# on 2 cores). The byte code must be there before the tests: a sandboxed judge cannot write it,
# and where PYTHONDONTWRITEBYTECODE is set (CI's environment sets it) no process can, so every
# process would compile what it imports again (pytest took 19 min instead of 11; leaving out the
# packages no judge imports cost every CLI process 0.3 s, the suite 68 s). Like pip, it skips what
# does not compile (some packages ship Python 2 test files); a second pass skips what is already
# compiled.
$(VENV)/.installed-runtime: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-compile --upgrade pip
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt -e .
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

$(VENV)/.installed: $(VENV)/.installed-runtime
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt -e ".[dev,ray]"
	$(BIN)/python -m pip install -q --no-compile --no-deps -c constraints.txt flashinfer-bench
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

# Optimize the bundled rmsnorm task offline: the tuner policy when no LLM endpoint is configured,
# the CPU Triton interpreter when no GPU is visible. Its closing lines name the CLI as
# .venv/bin/accelopt (`source .venv/bin/activate` puts `accelopt` on PATH).
demo: runtime
	$(BIN)/accelopt optimize evals/tasks/rmsnorm --beams 2 --plans 2 --samples 1 --iterations 2

# mypy sees neither pyproject's package-dir (accelopt.graph -> graph/, ...) nor the editable
# install's import hook: run on the folders themselves, it finds no `accelopt.*` module, and every
# type that crosses modules goes unchecked. So mypy checks build/mypy/accelopt instead: the same
# namespace as links to accelopt/*.py and the package-dir folders (keep PACKAGE_DIRS in step with
# pyproject). An error reads build/mypy/accelopt/nodes/x.py for nodes/x.py.
MYPY_TREE    := build/mypy/accelopt
PACKAGE_DIRS := cli graph nodes policies tools memory evals

.PHONY: mypy-tree
mypy-tree:
	rm -rf $(MYPY_TREE) && mkdir -p $(MYPY_TREE)
	for f in accelopt/*.py $(PACKAGE_DIRS); do ln -s ../../../$$f $(MYPY_TREE)/; done

lint: install mypy-tree
	$(BIN)/ruff check .
	$(BIN)/mypy

# CI runs this: ruff, then the CPU tests, a test file to a worker, with mypy beside them. The
# tests spend their time in processes they start (judges, servers, the CLI), which keep 2 cores
# about 90% busy (/proc/stat; `time` counts only the processes pytest itself reaps), mypy's 30 s
# beside them. Either failing fails the target, mypy's report printed last.
# The slowest tests are listed: CI has 15 minutes, and a slow test is a slow code path. The
# project's own modules are byte-compiled first, as the install compiles the packages: every CLI,
# judge and server process the tests start imports them (0.2 s a process without).
test: install mypy-tree
	$(BIN)/python -m compileall -qq -j 0 -x '/(tasks|realworld|results|fixtures)/' accelopt $(PACKAGE_DIRS) tests || true
	$(BIN)/ruff check .
	$(BIN)/mypy > build/mypy.log 2>&1 & types=$$!; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15; tests=$$?; \
	wait $$types; typed=$$?; cat build/mypy.log; exit $$(( tests != 0 || typed != 0 ))

gpu-test: install
	$(BIN)/python -m pytest -q -m gpu

clean:
	rm -rf $(VENV) runs .pytest_cache build/mypy
