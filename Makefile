# Self-Attention, Step by Step: build, test and maintenance targets.
# Every target that needs Python first creates .venv and installs the pinned
# requirements (once; again only when the lock or pyproject.toml change).

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
# the lock to install: requirements.txt (CPU), or requirements-gpu.txt on a machine with a CUDA
# GPU (make gpu-check REQUIREMENTS=requirements-gpu.txt)
REQUIREMENTS ?= requirements.txt
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LINT_PATHS := attnlib tests lessons tools book

.PHONY: help install book bundle test test-fast screenshots notebooks translations conventions bench gpu-check lock lint clean distclean

help:  ## show this list
	@echo "Self-Attention, Step by Step -- make targets:"
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "} {printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): $(REQUIREMENTS) pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "This book needs Python 3.11 or newer; '$(PYTHON)' is $$($(PYTHON) --version 2>&1)."; \
	  echo "Install a newer Python and run, for example: make $(MAKECMDGOALS) PYTHON=python3.11"; \
	  exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -r $(REQUIREMENTS)
	$(BIN)/pip install --no-deps -e .
	touch $@

install: $(STAMP)  ## create .venv and install the pinned requirements and attnlib

book: $(STAMP)  ## build the HTML book, English in _build/html and Chinese in _build/html/zh
	$(BIN)/jupyter-book build . -W -n --keep-going
	$(BIN)/jupyter-book build zh -W -n --keep-going --path-output _build/zh
	rm -rf _build/html/zh && cp -r _build/zh/_build/html _build/html/zh
	@echo "Open _build/html/index.html (English) or _build/html/zh/index.html (中文)"

bundle: book  ## the offline bundle (both editions' HTML and notebooks, attnlib's wheel, the lock) in _build/
	$(BIN)/python tools/bundle.py

test: $(STAMP)  ## every test: attnlib, every lesson (on a simulated other computer), both books, the browser
	$(BIN)/python -m pytest -n auto --maxprocesses 4 --durations=15

screenshots: $(STAMP)  ## the browser test, saving a screenshot of every lesson page to _build/screenshots
	ATTNLIB_SCREENSHOTS=1 $(BIN)/python -m pytest tests/test_browser.py

test-fast: $(STAMP)  ## the tests not marked slow: attnlib, exercises, conventions, translations (no lesson runs, book or browser)
	$(BIN)/python -m pytest -n auto --maxprocesses 4 -m "not slow"

notebooks: $(STAMP)  ## re-execute every lessons/*.ipynb in place
	$(BIN)/python tools/conventions.py --write
	PYTHONHASHSEED=0 $(BIN)/python tools/run_notebooks.py
	$(BIN)/python tools/translations.py generate  # the Chinese notebooks carry the new outputs

translations: $(STAMP)  ## update locale/zh_CN catalogs from the English text, then write zh/ from them
	$(BIN)/python tools/translations.py extract
	$(BIN)/python tools/translations.py check
	$(BIN)/python tools/translations.py generate

conventions: $(STAMP)  ## rewrite badges, setup cells and links from _config.yml's repository.url
	$(BIN)/python tools/conventions.py --write

bench: $(STAMP)  ## print attention timings as ratios (python -m attnlib.bench)
	$(BIN)/python -m attnlib.bench

gpu-check: $(STAMP)  ## on a CUDA GPU: the cuda tests, the bench and the kernels' resources, to docs/gpu-check.md
	$(BIN)/python tools/gpu_check.py

# One universal lock (markers for every platform), compiled twice: requirements-gpu.txt as PyPI's
# torch wheel needs it on Linux (its CUDA libraries pinned), then requirements.txt, constrained to
# the same versions, with those CUDA libraries excluded (a CPU wheel of torch needs none of them).
LOCK := $(BIN)/uv pip compile requirements.in pyproject.toml --extra lessons --universal \
        --python-version 3.11 --custom-compile-command "make lock" --annotation-style line --quiet
lock: $(STAMP)  ## recompile the pins (requirements.txt, requirements-gpu.txt) from requirements.in and pyproject.toml
	$(LOCK) -o requirements-gpu.txt
	grep -oE '^(nvidia|cuda)-[a-z0-9-]+' requirements-gpu.txt > $(VENV)/cuda-libraries.txt
	$(LOCK) --constraints requirements-gpu.txt --excludes $(VENV)/cuda-libraries.txt -o requirements.txt

lint: $(STAMP)  ## ruff check and ruff format --check
	$(BIN)/ruff check $(wildcard $(LINT_PATHS))
	$(BIN)/ruff format --check $(wildcard $(LINT_PATHS))

clean:  ## remove _build and caches (keeps .venv)
	rm -rf _build .pytest_cache .ruff_cache *.egg-info
	find . -path ./$(VENV) -prune -o \
	  \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -print0 | \
	  xargs -0 rm -rf

distclean: clean  ## clean, and remove .venv too
	rm -rf $(VENV)
