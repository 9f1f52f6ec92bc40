# The two set-up commands: `make demo` (install + the main job) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned here (a CPU build of this exact version lies on disk); pyproject states the range.
TORCH_PIN := torch==2.13.0

.PHONY: demo test test-fast portability bench lint install install-test browser compiler clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.torch: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH_PIN)
	touch $@

install: $(VENV)/.torch
	$(BIN)/pip install --quiet -e .

# pip runs again only when pyproject.toml or this file changes (the install is editable: src needs none).
$(VENV)/.installed-test: $(VENV)/.torch pyproject.toml Makefile
	$(BIN)/pip install --quiet -e '.[test,ray,convex,atlas]'
	touch $@

install-test: $(VENV)/.installed-test browser compiler

# The report tests drive Debian's Chromium (no browser download); install it once.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian chromium for the browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# torch.compile (Ensemble(compile=True), `gaugelab twins --compile`) builds C++ kernels on CPU.
compiler:
	@command -v g++ >/dev/null 2>&1 || { \
		echo "installing Debian g++ for torch.compile"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++; }

demo: install
	$(BIN)/gaugelab twins --quick

lint: install-test
	$(BIN)/ruff check src tests benchmarks

# The full suite on pytest-xdist (one worker per core), then the fixed thresholds on measured
# floats under two more CPU variations (tests/portability.sh --quick).
test: install-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest
	PYTHON=$(BIN)/python tests/portability.sh --quick

# The thresholds under all six variations (ATen kernels default/avx2/native × 1, 2 threads).
portability: install-test
	PYTHON=$(BIN)/python tests/portability.sh

# The edit-test loop (about a minute on 2 cores): the unit layers, the layer check and the CLI's
# option parsing. `make test` stays the full suite, and is what .ci/run calls.
FAST_TESTS := tests/linalg tests/gauge tests/optim tests/models tests/tasks tests/adapters \
	tests/lowrank tests/test_layers.py tests/cli/test_errors.py tests/cli/test_console.py

test-fast: install-test
	$(BIN)/python -m pytest $(FAST_TESTS)

bench: install
	$(BIN)/gaugelab bench

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
