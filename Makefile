# The two commands: `make demo` and `make test`. Both create .venv and install on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev
export PATH := $(CURDIR)/$(BIN):$(PATH)

PACKAGES := mqgather bridge workflows activities workers analytics bench

.PHONY: demo test docs lint typecheck unit bench bench-scale bytecode install clean histories browser postgres stack-secrets

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

install: $(STAMP)

# The worker's sandbox re-imports the workflow modules for every gather; with bytecode on
# disk that is a load, not a compile (PYTHONDONTWRITEBYTECODE may be set). Incremental.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q $(PACKAGES)

demo: bytecode
	$(BIN)/mqgather demo

# The production stack's .env: a random value for every secret docker-compose.yml needs
# (kept if already set). Then: docker compose up -d --build
stack-secrets: $(STAMP)
	$(BIN)/mqgather stack init

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy $(PACKAGES)

# The tests mostly wait on servers and processes: one pytest process per core, at most
# four (each starts its own Temporal dev server and, for the analytics, its own Spark).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

unit: bytecode
	$(BIN)/pytest -q -n $(TEST_WORKERS)

# The docs site: reference pages from the code, then a strict build (no broken link).
docs: $(STAMP)
	$(BIN)/python docs/generate.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint typecheck unit

# Chromium for the browser tests, from the distribution's packages (needs root); without
# it those tests skip and say why.
browser:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null; } || \
		echo "could not install chromium: the browser tests will skip"; \
	else echo "no chromium and no root to install it: the browser tests will skip"; fi

# PostgreSQL for the collector's rules tests, from the distribution's packages (needs
# root); the suite starts its own server. Without it those tests skip and say why.
postgres:
	@if command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y -q --no-install-recommends postgresql >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends postgresql >/dev/null; } || \
		echo "could not install postgresql: the PostgreSQL tests will skip"; \
	else echo "no PostgreSQL and no root to install it: the PostgreSQL tests will skip"; fi

# Every benchmark, quietly, one at a time (refused while another runs): one table of
# ratios to floors in bench/results/<date>.md, the full output beside it.
bench: bytecode
	$(BIN)/python -m bench.suite

# The gather pipeline with up to 50,000 gathers open in the background: about 40 minutes
# here, most of it opening them.
bench-scale: bytecode
	$(BIN)/python -m bench.gather_throughput --gathers 600 --open 0,1000,10000,50000

# A new set of recorded gather histories (tests/workflows/histories/<build id>/) from the
# current workflow code; commit it when a new workflow version ships (`--large` in
# ARGS: the gathers and a collector too large to carry, into <build id>-large/).
histories: bytecode
	$(BIN)/python -m tests.workflows.record $(ARGS) $(SET)

clean:
	rm -rf $(VENV) .mqgather .pytest_cache .mypy_cache .ruff_cache
