# abtest: `make demo` runs a real A/B comparison, `make test` runs the test suite.
# Both start with `make setup`, which is idempotent and does all set-up on a fresh Debian machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
# lava-server + lava-dispatcher + postgresql: LAVA for `abtest collect --lab` and its tests (docs/lab.md).
# lava-server's postinst skips its database when PostgreSQL is not running (no systemd here): nothing to
# answer, and the tests run a private stack (tests/lava_stack.py), so no dpkg-reconfigure is needed.
# chromium + chromium-driver: the `abtest history serve` dashboard test in a headless browser (docs/history.md).
APT_PKGS := trace-cmd openssh-server openssh-client stress-ng sysbench rt-tests rt-app \
            qemu-system-x86 busybox-static dropbear-bin adb zstd sqlite3 cpio xz-utils \
            lava-server lava-dispatcher postgresql chromium chromium-driver
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STAMP := $(VENV)/.abtest-setup
CORE_STAMP := $(VENV)/.abtest-core
NATIVE_SRC := $(wildcard native/src/*.rs native/*/src/*.rs native/*/src/*.txt native/*/Cargo.toml) native/Cargo.toml
# seconds of mutation fuzzing per decoder in `make test` (bench/fuzz_native.sh runs longer)
FUZZ_SECONDS ?= 20

.PHONY: setup setup-core system native native-check lint test demo demo-live notebook notebooks bench clean

# Everything the tests and `make demo-live` use: the Debian packages above, the virtualenv, the Rust core.
setup: system $(STAMP)

# What `make demo` needs: the virtualenv and the Rust core only (the bundled store is read by abtest itself;
# QEMU, LAVA, PostgreSQL and the tracing tools are for the tests and demo-live). Prints how long it took.
setup-core:
	@t0=$$(date +%s); \
	command -v cargo >/dev/null || { echo "cargo (Rust) is needed to build abtest's native core: https://rustup.rs"; exit 1; }; \
	$(MAKE) --no-print-directory $(CORE_STAMP) && echo "set-up: $$(( $$(date +%s) - t0 )) s"

# Debian packages the tools and tests use (installed only when one is missing).
system:
	@missing=$$(for p in $(APT_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@command -v cargo >/dev/null || { echo "cargo (Rust) is needed to build abtest's native core: https://rustup.rs"; exit 1; }

# abtest with its runtime dependencies and the Rust core (built once by maturin).
$(CORE_STAMP): pyproject.toml $(NATIVE_SRC)
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	@$(PY) -c "import abtest._native" && touch $@

# + the [dev] extras (test runner, notebooks, linters, the second engine), without building the core again.
$(STAMP): $(CORE_STAMP) pyproject.toml
	$(PY) -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['dev']))" > $(VENV)/dev-requirements.txt
	$(PY) -m pip install -q -r $(VENV)/dev-requirements.txt
	@touch $@

# Rebuild only the Rust extension (fast path while working on native/).
native:
	@[ -x $(PY) ] || $(MAKE) setup
	@[ -x $(VENV)/bin/maturin ] || $(PY) -m pip install -q 'maturin>=1.5,<2'
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q

test: setup native-check lint
	$(VENV)/bin/pytest -q

# Python hygiene, as native-check is for the Rust: ruff's lint rules and formatting (pyproject.toml [tool.ruff]).
lint: setup
	$(VENV)/bin/ruff check abtest tests bench
	$(VENV)/bin/ruff format --check abtest tests bench

# Rust hygiene of native/: formatting, clippy with warnings as errors, the decoders' unit tests and
# FUZZ_SECONDS of mutation fuzzing per decoder (native/fuzz). The fuzzers' seeds are the shared traces, found
# as the Python tests find them (tests/shared_data.py: also from a clone in a temporary directory).
native-check: setup
	cd native && cargo fmt --all -- --check
	cd native && cargo clippy --workspace --all-targets --release -q -- -D warnings
	cd native && ABTEST_SHARED="$$(cd ../tests && $(abspath $(PY)) -c 'from shared_data import SHARED; print(SHARED)')" \
		ABTEST_FUZZ_SECONDS=$(FUZZ_SECONDS) cargo test --release -q -p abtest-native -p abtest-tracedat -p abtest-perfetto -p abtest-sim -p abtest-fuzz

demo: setup-core
	$(VENV)/bin/python -m abtest.demo

# Collects a new A/B on this machine first: Debian kernels 6.1 vs 6.12 under QEMU, or cpuidle governors menu vs
# ladder when this machine has a cpuidle driver with both (DEMO_VARIANT=kernels|governors|auto).
DEMO_VARIANT ?= auto
demo-live: setup
	$(VENV)/bin/python -m abtest.demo --live --variant $(DEMO_VARIANT)

# JupyterLab on notebooks/ (localhost; as root it needs --allow-root). The notebooks run on the bundled store and
# the shared traces; their caches go to the user cache directory, never into examples/.
notebook: setup
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

# Re-run the notebooks and save them with their outputs (committed: GitHub shows the figures; ~0.6 MB).
notebooks: setup
	$(PY) notebooks/render.py

bench: setup
	$(VENV)/bin/python bench/ingest.py

clean:
	rm -rf $(VENV) native/target abtest/_native*.so
