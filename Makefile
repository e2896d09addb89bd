# The two commands of the README: `make demo` and `make test`.
# Both create .venv and install benchledger with its dev tools on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/benchledger --url sqlite:///demo.db demo

lint: $(STAMP)
	$(BIN)/lint-imports  # the layers of docs/architecture.md ([tool.importlinter] in pyproject.toml)
	$(BIN)/ruff check src tests migrations benchmarks docs
	$(BIN)/ruff format --check src tests migrations benchmarks docs

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

# Every test on SQLite, on a throwaway PostgreSQL server started for the run and
# through a PgBouncer in front of it; on two pytest-xdist workers (PYTEST_WORKERS),
# since most tests wait on real processes, servers and clocks more than on a core.
PYTEST_WORKERS ?= 2
pytest: $(STAMP)
	scripts/ensure-chromium.sh
	BENCHLEDGER_TEST_BACKENDS=sqlite,postgresql,pgbouncer scripts/with-postgres.sh \
	  $(BIN)/pytest -n $(PYTEST_WORKERS)

test: lint typecheck pytest

# The bench extra (Optuna, bench_study's reference), installed once like dev.
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

# Every benchmarks/bench_*.py, each figure beside a reference measured in the same run:
# one table on stdout, benchmarks/results.json. Starts its own PostgreSQL like `pytest`,
# durable as deployed (fsync on), where the tests' server runs with fsync off.
bench: $(BENCH_STAMP)
	BENCHLEDGER_PG_DURABLE=1 scripts/with-postgres.sh $(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache demo.db demo.db-wal demo.db-shm
