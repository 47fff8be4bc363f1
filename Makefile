# zonemedic developer commands. `make test` is what CI runs (through .ci/run).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo prometheus rsvg demo-docs lint typecheck contracts checks pytest test test-all soak bench bench-report clean lock

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# The README's first command: the whole story on this machine (the twin, a real Prometheus, a fake
# Slack and the agent, ~30 s). Options: make demo DEMO="--scenario lab --interactive".
DEMO ?=
demo: install prometheus
	$(BIN)/zonemedic demo $(DEMO)

# Prometheus for the demo and the tests: the Debian package `prometheus`, installed when it is
# missing and this user may (root, with apt-get); otherwise say so (the demo then runs without
# metrics). The package starts a service of its own on :9090: stopped again (the demo and the
# tests start their own Prometheus on free ports).
PROMETHEUS_BIN ?= $(shell command -v prometheus 2>/dev/null || ls /usr/bin/prometheus 2>/dev/null)
APT_GET ?= apt-get
prometheus:
	@if [ -z "$(PROMETHEUS_BIN)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v $(APT_GET) >/dev/null 2>&1; then \
	    echo "make: installing Prometheus (Debian package prometheus)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    if $(APT_GET) install -y -qq prometheus >/dev/null 2>&1 \
	       || { $(APT_GET) update -qq && $(APT_GET) install -y -qq prometheus >/dev/null; }; then \
	      { systemctl stop prometheus || service prometheus stop; } >/dev/null 2>&1 || true; \
	    else \
	      echo "make: could not install Prometheus: the demo runs without metrics"; \
	    fi; \
	  else \
	    echo "make: Prometheus is not installed and cannot be installed here (needs root and"; \
	    echo "      apt-get: sudo apt-get install prometheus); the demo runs without metrics"; \
	  fi; \
	fi

# The README's transcript and pictures of the demo, from a real run (docs/screenshot.py):
# docs/demo-output.txt, docs/demo-chart.png and docs/demo-terminal.png. The terminal picture is
# drawn by rsvg-convert (Debian package librsvg2-bin, emoji from fonts-noto-color-emoji), installed
# here as `make prometheus` installs Prometheus; without it the script writes the text and the
# chart and says what is missing.
RSVG_BIN ?= $(shell command -v rsvg-convert 2>/dev/null)
RSVG_PACKAGES := librsvg2-bin fonts-noto-color-emoji
rsvg:
	@if [ -z "$(RSVG_BIN)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v $(APT_GET) >/dev/null 2>&1; then \
	    echo "make: installing rsvg-convert (Debian packages $(RSVG_PACKAGES))"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    $(APT_GET) install -y -qq $(RSVG_PACKAGES) >/dev/null 2>&1 \
	      || { $(APT_GET) update -qq && $(APT_GET) install -y -qq $(RSVG_PACKAGES) >/dev/null; } \
	      || echo "make: could not install rsvg-convert: no terminal picture (the text and the chart are written)"; \
	  else \
	    echo "make: rsvg-convert is not installed and cannot be installed here (needs root and"; \
	    echo "      apt-get: sudo apt-get install $(RSVG_PACKAGES)); no terminal picture"; \
	  fi; \
	fi

demo-docs: install prometheus rsvg
	$(BIN)/python docs/screenshot.py

# Regenerate the constraints file from a fresh resolve (run after changing dependencies).
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q -e '.[dev]'
	.venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^zonemedic' > constraints.txt
	rm -rf .venv-lock

# The dependency audit fails on a known vulnerability in the lock and only warns when the
# vulnerability service cannot be reached (offline machines, a missing database).
lint: install
	$(BIN)/ruff check agent tests tools $(wildcard bench migrations docs)
	$(BIN)/python tools/dependency_audit.py constraints.txt

typecheck: install
	$(BIN)/mypy

contracts: install
	$(BIN)/lint-imports

# The suite runs on PYTEST_WORKERS pytest-xdist workers (tests/conftest.py: order, the
# Hypothesis profile) and ends with the slowest tests. Bytecode (pytest's rewritten test modules
# too) is cached under the venv, so workers and the many `python -m agent.cli` subprocesses compile
# each module once per checkout, whatever PYTHONDONTWRITEBYTECODE says.
PYTEST_WORKERS ?= 3
PYTEST_PARALLEL = -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --hypothesis-profile=ci
PYCACHE_ENV = PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache
# The checks (lint, typecheck, contracts: a cold mypy is a minute or more of one core) run in the
# background beside pytest, whose workers mostly wait; each check's output is printed whole when
# it ends (--output-sync), pytest's as it comes. `make test` fails when pytest or any check
# failed: it waits for both and says which failed.
test: install
	@$(MAKE) --no-print-directory -j3 --output-sync=target checks & checks=$$!; \
	$(MAKE) --no-print-directory pytest; tests=$$?; \
	wait $$checks; checked=$$?; \
	if [ $$checked -ne 0 ]; then echo "make test: FAILED: lint, typecheck or contracts (above)"; fi; \
	if [ $$tests -ne 0 ]; then echo "make test: FAILED: pytest (above)"; fi; \
	[ $$checked -eq 0 ] && [ $$tests -eq 0 ]

checks: lint typecheck contracts

pytest: install
	$(PYCACHE_ENV) $(BIN)/pytest -q -m "not slow" -p no:cacheprovider $(PYTEST_PARALLEL) --durations=25

test-all: install
	$(BIN)/pytest -q -p no:cacheprovider

# The soaks (tests/soak, marked slow): 1 minute, then 10, of faults, replicas, clicks; each prints
# its seed and counts.
# Replay a seed with ZONEMEDIC_SOAK_SEED=N make soak; ZONEMEDIC_SOAK_SECONDS=180 shortens the 10.
soak: install
	$(BIN)/pytest -q -s -m slow -p no:cacheprovider tests/soak

# every benchmark in bench/, one at a time, into bench/results.json (QUICK=1: reduced sizes, < 2 min)
bench: install
	$(BIN)/python bench/run.py $(if $(QUICK),--quick,)

# regenerate the README's performance section from bench/results.json
bench-report: install
	$(BIN)/python bench/report.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
