# Two commands do everything on a fresh machine:
#   make emulator   start the terminal emulator (installs what it needs first)
#   make test       install everything into .venv and run the whole suite
VENV    := .venv
PY      := $(VENV)/bin/python
BIN     := $(abspath $(VENV)/bin)
STAMP   := $(VENV)/.installed
export PATH := $(BIN):$(PATH)

.PHONY: test lint mpy-test pytest emulator bench deploy setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml tests/mpy/package.json tests/mpy/package-lock.json tools/install-system-deps.sh
	bash tools/install-system-deps.sh
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	cd tests/mpy && npm ci --no-audit --no-fund --loglevel=error
	touch $(STAMP)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	node tests/mpy/run.mjs
	node tests/mpy/run.mjs --suite firmware
	$(VENV)/bin/pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check .

mpy-test: $(STAMP)
	node tests/mpy/run.mjs
	node tests/mpy/run.mjs --suite firmware

pytest: $(STAMP)
	$(VENV)/bin/pytest -q

emulator: $(STAMP)
	$(PY) -m emulator $(ARGS)

# Copy the firmware to a board: make deploy PORT=/dev/ttyUSB0 CONFIG=firmware/config.json (ARGS=--dry-run to see)
deploy: $(STAMP)
	$(PY) firmware/deploy.py $(if $(PORT),--port $(PORT)) $(if $(CONFIG),--config $(CONFIG)) $(ARGS)

bench: $(STAMP)
	$(PY) bench/run_all.py $(ARGS)

clean:
	rm -rf $(VENV) tests/mpy/node_modules build
