# Two commands for a newcomer: `make quickstart` and `make test`.
# Both create .venv on first use and install the pinned CPU dependencies into it.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONSTRAINTS := requirements/constraints-cpu.txt

.PHONY: quickstart test lint format bench clean-venv

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch would pull the CUDA build (gigabytes).
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) torch
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[dev]"
	touch $(STAMP)

quickstart: $(STAMP)
	$(BIN)/ascent quickstart

test: $(STAMP) lint
	$(BIN)/python -m pytest -m "not gpu" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

format: $(STAMP)
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

bench: $(STAMP)
	$(BIN)/python bench/logprob_memory.py

clean-venv:
	rm -rf $(VENV)
