# gangpreempt: every target creates the virtualenv and installs the package when needed,
# so any one of them works on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install test test-peers lint demo bench chaos peers clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install gangpreempt with its dev extras

test: $(STAMP) ## run the whole test suite (unit, scenarios, integration)
	$(BIN)/pytest

peers: ## build kube-apiserver, kube-scheduler, Kueue and etcd from source (first: ~10 min)
	nice -n 10 tools/peers/build.sh

test-peers: $(STAMP) peers ## the tests against the real control plane (tests/peers)
	$(BIN)/pytest -m peers tests/peers

lint: $(STAMP) ## ruff and mypy --strict
	$(BIN)/ruff check libs services tests bench tools
	$(BIN)/ruff format --check libs services tests bench tools
	$(BIN)/mypy

demo: $(STAMP) ## run the four services on the bundled scenario until settled
	$(BIN)/gangpreempt up --scenario examples/saga-demo --until-settled

bench: $(STAMP) ## run the benchmarks; figures printed, JSON in bench/results/
	$(BIN)/python bench/quota.py
	$(BIN)/python bench/quota.py --fair-sharing
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/victims.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/fencing.py
	$(BIN)/python bench/actuation.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/flood.py
	$(BIN)/python bench/soak.py
	$(BIN)/python bench/replay.py

chaos: $(STAMP) ## the fault-injection suite: 20 runs per fault class, invariants checked
	$(BIN)/python -m tests.chaos.run --runs 20

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
