# Two commands matter: `make run` (the tour) and `make test` (the whole suite).
# Both create .venv on first use and install the project into it from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-pythons lint typecheck pytest bench clean

$(STAMP): pyproject.toml setup.py tlog/_speedups.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,all]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python examples/tour.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -n auto -q

test: lint typecheck pytest

# The suite on every supported Python (pyproject.toml's classifiers), each in its own .venv-X.Y;
# an interpreter that is missing fails the target. PYTHONS=3.12 make test-pythons runs one.
PYTHONS ?= 3.11 3.12 3.13
test-pythons:
	for v in $(PYTHONS); do \
	  py=; for c in $$HOME/.pyenv/versions/$$v*/bin/python$$v $$(command -v python$$v); do \
	    $$c -c '' 2>/dev/null && { py=$$c; break; }; done; \
	  test -n "$$py" || { echo "python$$v not found" >&2; exit 1; }; \
	  $(MAKE) pytest PYTHON=$$py VENV=.venv-$$v || exit 1; \
	done

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .venv-3.* .venv-peers .mypy_cache .ruff_cache .pytest_cache .hypothesis
