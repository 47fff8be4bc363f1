# zonemedic developer commands. `make test` is what CI runs (through .ci/run).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install lint typecheck contracts test test-all bench bench-report clean lock

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# Regenerate the constraints file from a fresh resolve (run after changing dependencies).
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q -e '.[dev]'
	.venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^zonemedic' > constraints.txt
	rm -rf .venv-lock

# The dependency audit fails on a known vulnerability in the lock and only warns when the
# vulnerability service cannot be reached (offline machines, a missing database).
lint: install
	$(BIN)/ruff check agent tests tools $(wildcard bench migrations)
	$(BIN)/python tools/dependency_audit.py constraints.txt

typecheck: install
	$(BIN)/mypy

contracts: install
	$(BIN)/lint-imports

test: lint typecheck contracts
	$(BIN)/pytest -q -m "not slow" -p no:cacheprovider

test-all: install
	$(BIN)/pytest -q -p no:cacheprovider

# every benchmark in bench/, one at a time, into bench/results.json (QUICK=1: reduced sizes, < 2 min)
bench: install
	$(BIN)/python bench/run.py $(if $(QUICK),--quick,)

# regenerate the README's performance section from bench/results.json
bench-report: install
	$(BIN)/python bench/report.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
