# The README's quick start: `make run`, `make install` and `make test`. They provision
# libtorch (.venv with torch==2.13.0) first; a LIBTORCH you export yourself wins.
SHELL := /bin/bash
.DEFAULT_GOAL := run

# libtorch for building the worker: the user's LIBTORCH, else the .venv's torch/.
TORCH_ENV = LIBTORCH="$${LIBTORCH:-$$(cat .venv/lib/torch-path)}"

# Where `make install` puts lavenderd and lavender-worker (PREFIX/bin).
PREFIX ?= $(HOME)/.local

.PHONY: run test test-run lint fmt clippy test-build setup build install uninstall bench

setup:
	@bash scripts/setup-libtorch.sh

build: setup
	@$(TORCH_ENV) cargo build --release --workspace

# The demo's data (corpus, shards, tokens, checkpoints, logs) goes to ./data-root.
DEMO_ROOT := $(CURDIR)/data-root

run: build
	@./target/release/lavenderd start --scale tiny --foreground --data-root "$(DEMO_ROOT)"
	@echo "--- a sample from the trained model:"
	@./target/release/lavender-worker generate --data-root "$(DEMO_ROOT)" --checkpoint latest --prompt "ROMEO:"

install: build
	@bash scripts/install.sh install "$(PREFIX)" target/release

uninstall:
	@bash scripts/install.sh uninstall "$(PREFIX)"

fmt:
	cargo fmt --all --check

clippy: setup
	@$(TORCH_ENV) cargo clippy --workspace --all-targets -- -D warnings

lint: fmt clippy

# Builds every test binary without running it (CI times this apart from the run).
test-build: setup
	@$(TORCH_ENV) cargo test --workspace --no-run

test: setup lint test-build test-run

# Runs the tests (building what is missing); the output is kept in target/test.log.
test-run: setup
	@mkdir -p target; $(TORCH_ENV) cargo test --workspace 2>&1 | tee target/test.log; exit $${PIPESTATUS[0]}

# Benchmarks (not tests): status API, daemon overhead, detection latency, checkpoint
# I/O, trainer and interference; docs/BENCHMARKS.md records the results.
bench: setup
	@$(TORCH_ENV) bash bench/run-all.sh
