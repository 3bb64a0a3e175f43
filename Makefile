# The two commands: `make demo` and `make test`. Both create .venv and install on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: demo test lint typecheck unit bench install clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/mqgather demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy mqgather bridge workflows activities workers analytics

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/mq_throughput.py

clean:
	rm -rf $(VENV) .mqgather .pytest_cache .mypy_cache .ruff_cache
