# Every target creates .venv on first use, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
# The editable installs are strict (a link tree in build/, which mypy and the
# layering tests can follow), and setuptools says so in a boxed notice that pip
# repeats. The filter drops that one notice (its message starts "Editable
# installation."); every other warning and every error still shows.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation." $(BIN)/python -m pip install --quiet

.PHONY: demo test lint typecheck unit bench clean FORCE

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The strict editable install links each module one by one, so a module added
# or removed since the last install (a pull, a branch switch) needs a new one:
# the list of package files is kept in $(FILES), rewritten only when it changes.
FILES := $(VENV)/.package-files

$(FILES): FORCE | $(BIN)/python
	@find engine stores adapters -type f -not -path '*/__pycache__/*' | LC_ALL=C sort > $@.new
	@cmp -s $@.new $@ && rm $@.new || mv $@.new $@

$(VENV)/.installed: pyproject.toml $(FILES) | $(BIN)/python
	$(PIP_INSTALL) -e . --config-settings editable_mode=strict
	touch $@

$(STAMP): pyproject.toml $(FILES) | $(BIN)/python
	$(PIP_INSTALL) -e '.[dev]' --config-settings editable_mode=strict
	touch $(VENV)/.installed $@

demo: $(VENV)/.installed
	$(BIN)/trioplay demo

lint: $(STAMP)
	$(BIN)/ruff check engine stores adapters tests benchmarks examples
	$(BIN)/ruff format --check engine stores adapters tests benchmarks examples
	$(BIN)/mypy

# Two workers, one test file each at a time: the suite mostly waits (subprocesses,
# PostgreSQL, real-time faults), so two files overlap their waiting even on two
# cores (docs/architecture.md, "The test suite").
unit: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

test: lint unit

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .trioplay .mypy_cache .pytest_cache .ruff_cache build *.egg-info
