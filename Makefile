# Quick start: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test

.PHONY: demo test lint venv clean bench infra browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e .
	touch $@

# The test extras, and the batch-system plug-in of tests/plugins installed beside the package as a
# third-party distribution would be (the contract suite and tests/remote/test_plugin.py drive it).
PLUGIN := tests/plugins/httk-workflow-toybatch

$(STAMP): $(BIN)/python pyproject.toml $(PLUGIN)/pyproject.toml $(PLUGIN)/httk_toybatch/__init__.py
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m pip install -q --no-deps --force-reinstall ./$(PLUGIN)
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

# Debian's chromium for the headless-browser test of 'workspace report' (tests/cli/test_cli_report.py);
# as for infra it needs root and apt-get, and elsewhere that test skips with the reason.
browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/tmp/ci-chromium-apt.log 2>&1 || \
		{ apt-get update -q >>/tmp/ci-chromium-apt.log 2>&1 && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >>/tmp/ci-chromium-apt.log 2>&1; } || \
		echo "browser: installing chromium failed (see /tmp/ci-chromium-apt.log): the browser test will skip"; \
	else \
		echo "browser: not root or no apt-get: the headless-browser test will skip (as root: make browser)"; \
	fi

test: $(STAMP) infra browser
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache
