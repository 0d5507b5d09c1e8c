# Two commands for a fresh clone:
#   make search   set up .venv (pinned versions) and run the main job on local Ray
#   make test     set up .venv and run the test suite (what CI runs)
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: setup search test test-bench bench bench-setup bench-quick lint docs clean

setup: $(STAMP)

# uv installs the pinned set (pip took 150 s of a fresh clone's set-up here), compiling
# the bytecode as pip does: without it, with PYTHONDONTWRITEBYTECODE set, every Ray worker
# compiled torch's and Ray's modules again at each import (the test suite ran 3x slower).
# torch first, pinned exactly: the CPU build of 2.13.0 on these machines (pip's
# PIP_FIND_LINKS folder is passed on; uv reads UV_INDEX_URL and the like, not pip.conf).
# Any range that admits a newer release pulls a multi-GB CUDA build.
UV      = $(BIN)/python -m uv pip install -q --compile-bytecode --python $(BIN)/python
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv==0.13.10
	$(UV) $${PIP_FIND_LINKS:+--find-links $$PIP_FIND_LINKS} torch==2.13.0
	$(UV) -r requirements.lock
	$(UV) --no-deps mf-prior-bench==1.10.0
	$(UV) --no-deps -e .
	@touch $(STAMP)

search: setup
	$(BIN)/automl search search_spaces/resnet.yaml

test: setup
	$(BIN)/python -m pytest -q

# the benchmarks' quick runs, each checked for its documented record (CI: after make test)
test-bench: setup
	$(BIN)/python -m pytest -q -m bench

# benchmark-only peers (YAHPO Gym, DEHB, Syne Tune, SMAC3): never product dependencies;
# --no-deps with the lock as constraints, so no pinned version moves
bench-setup: setup
	$(UV) --no-deps -c requirements.lock -r requirements-bench.txt

bench: bench-setup
	$(BIN)/python -m benchmarks

bench-quick: setup
	$(BIN)/python -m benchmarks --quick

lint: setup
	$(BIN)/ruff check automl tests benchmarks

# the documentation site on http://127.0.0.1:8000, rebuilt on every change (no hosted copy)
docs: setup
	$(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) runs .pytest_cache site
