# zonemedic developer commands. `make test` is what CI runs (through .ci/run).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install lint typecheck contracts test test-all soak bench clean lock

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

lint: install
	$(BIN)/ruff check agent tests $(wildcard bench migrations)

typecheck: install
	$(BIN)/mypy

contracts: install
	$(BIN)/lint-imports

test: lint typecheck contracts
	$(BIN)/pytest -q -m "not slow" -p no:cacheprovider

test-all: install
	$(BIN)/pytest -q -p no:cacheprovider

# The 10-minute soak (tests/soak): faults, replicas, clicks; prints its seed and counts.
# Replay a seed with ZONEMEDIC_SOAK_SEED=N make soak.
soak: install
	$(BIN)/pytest -q -s -m slow -p no:cacheprovider tests/soak

bench: install
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
