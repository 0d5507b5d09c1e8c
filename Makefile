# Two commands for a fresh clone:
#   make search   set up .venv (pinned versions) and run the main job on local Ray
#   make test     set up .venv and run the test suite (what CI runs)
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: setup search test test-bench bench bench-setup bench-quick lint docs clean

setup: $(STAMP)

# torch first, pinned exactly: the CPU build of 2.13.0 on these machines. Any range
# that admits a newer release makes pip pull a multi-GB CUDA build.
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps mf-prior-bench==1.10.0
	$(BIN)/python -m pip install -q --no-deps -e .
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
	$(BIN)/python -m pip install -q --no-deps -c requirements.lock -r requirements-bench.txt

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
