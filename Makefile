# runstore: every command the project needs. CI runs these same targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LISTEN ?= 127.0.0.1:50051
DATABASE_URL ?= sqlite:///var/runstore.db
PROTOS := $(wildcard protos/runstore/v1/*.proto)

.PHONY: install run test test-pg proto lint fmt migrate bench bench-quick check clean

# The virtual environment: both distributions in editable mode plus the dev tools.
$(STAMP): pyproject.toml client/pyproject.toml server/pyproject.toml
	@echo "make install: creating $(VENV) with runstore-client, runstore-server and the dev tools (about a minute the first time)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet -e ./client -e ./server --group dev
	touch $@

install: $(STAMP)

## Serve on $(LISTEN) with the embedded SQLite database under var/.
run: install
	$(BIN)/runstore serve --listen $(LISTEN) --database-url $(DATABASE_URL)

## The whole suite; PostgreSQL tests run when RUNSTORE_TEST_POSTGRES_URL is set
## (the end of the run says how many were skipped otherwise).
test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-pg: install
	RUNSTORE_TEST_POSTGRES_URL=$${RUNSTORE_TEST_POSTGRES_URL:-postgresql://postgres@127.0.0.1:5432/test} \
		$(BIN)/python -m pytest $(PYTEST_ARGS)

## Regenerate runstore.v1 from protos/ (committed; must leave no diff).
proto: install
	$(BIN)/python -m grpc_tools.protoc -Iprotos \
		--python_out=client --pyi_out=client --grpc_python_out=client $(PROTOS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

migrate: install
	$(BIN)/runstore migrate --database-url $(DATABASE_URL)

## Benchmarks: a real server process driven from a separate client process.
## `make bench ARGS="--backend sqlite --duration 5"`; see `python -m bench --help`.
bench: install
	$(BIN)/python -m bench $(ARGS)

bench-quick: install
	$(BIN)/python -m bench --quick $(ARGS)

check: lint test

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
