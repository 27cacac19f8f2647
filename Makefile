# Quick start: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test

.PHONY: demo test lint venv clean bench infra

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e .
	touch $@

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/defects/demo.sh

lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks

# Real Slurm + sshd on 127.0.0.1 for the slurm/ssh tests (tests/infra/start-slurm-ssh.sh). It needs
# root and apt-get; elsewhere those tests skip with the reason, and this target only says so.
infra:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		bash tests/infra/start-slurm-ssh.sh; \
	else \
		echo "infra: not root or no apt-get: the slurm/ssh tests will skip (as root: make infra)"; \
	fi

test: $(STAMP) infra
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache
