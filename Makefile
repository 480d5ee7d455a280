# Two commands do everything on a fresh machine:
#   make emulator   start the terminal emulator (installs only what it needs first: the [emulator] extra)
#   make test       install everything into .venv (the [dev] extra, Node.js packages) and run the whole suite
VENV    := .venv
PY      := $(VENV)/bin/python
BIN     := $(abspath $(VENV)/bin)
STAMP   := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-emulator
export PATH := $(BIN):$(PATH)

.PHONY: test lint mpy-test pytest emulator bench deploy setup clean

setup: $(STAMP)

# Each step says what it installs and where (pip's own lines name every package it collects).
$(STAMP): pyproject.toml tests/mpy/package.json tests/mpy/package-lock.json tools/install-system-deps.sh
	@echo "== Debian packages the suite drives (tools/install-system-deps.sh): only those missing"
	bash tools/install-system-deps.sh
	@echo "== $(VENV): a Python virtual environment with the package and its [dev] extra (all parts and the test tools)"
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install --progress-bar off -e '.[dev]'
	@echo "== tests/mpy/node_modules: the Node.js packages of the MicroPython suites (package-lock.json)"
	cd tests/mpy && npm ci --no-audit --no-fund --loglevel=error
	touch $(STAMP) $(RUN_STAMP)
	@echo "== installed: $(BIN) holds sentinel-send, sentinel-gateway, sentinel-probe and sentinel-emulator"

# The emulator's runtime set only; a .venv that already has the full set (newer $(STAMP)) is used as it is.
$(RUN_STAMP): pyproject.toml tools/install-system-deps.sh
	@echo "== Debian packages the emulator needs (tools/install-system-deps.sh emulator): only those missing"
	bash tools/install-system-deps.sh emulator
	@echo "== $(VENV): a Python virtual environment with the package and its [emulator] extra"
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install --progress-bar off -e '.[emulator]'
	touch $(RUN_STAMP)
	@echo "== installed: $(BIN)/sentinel-send sends to the emulator from another shell"

# ruff, the node MicroPython suites alongside pytest on PYTEST_JOBS workers, then the latency-bound tests alone
test: $(STAMP)
	bash tools/run-tests.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check .

mpy-test: $(STAMP)
	node --single-threaded tests/mpy/run.mjs
	node --single-threaded tests/mpy/run.mjs --suite firmware

pytest: $(STAMP)
	$(VENV)/bin/pytest -q

emulator: $(RUN_STAMP)
	$(PY) -m emulator $(ARGS)

# Copy the firmware to a board: make deploy PORT=/dev/ttyUSB0 CONFIG=firmware/config.json (ARGS=--dry-run to see)
deploy: $(STAMP)
	$(PY) firmware/deploy.py $(if $(PORT),--port $(PORT)) $(if $(CONFIG),--config $(CONFIG)) $(ARGS)

bench: $(STAMP)
	bash tools/install-system-deps.sh --bench
	$(PY) bench/run_all.py $(ARGS)

clean:
	rm -rf $(VENV) tests/mpy/node_modules build
