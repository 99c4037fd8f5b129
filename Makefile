# The README's quick start: `make run` and `make test`. Both provision libtorch
# (.venv with torch==2.13.0) first; a LIBTORCH you export yourself wins.
SHELL := /bin/bash
.DEFAULT_GOAL := run

# libtorch for building the worker: the user's LIBTORCH, else the .venv's torch/.
TORCH_ENV = LIBTORCH="$${LIBTORCH:-$$(cat .venv/lib/torch-path)}"

.PHONY: run test lint setup build bench

setup:
	@bash scripts/setup-libtorch.sh

build: setup
	@$(TORCH_ENV) cargo build --release --workspace

# The demo's data (corpus, shards, tokens, checkpoints, logs) goes to ./data-root.
DEMO_ROOT := $(CURDIR)/data-root

run: build
	@PATH="$(CURDIR)/target/release:$$PATH" ./target/release/lavenderd start --scale tiny --foreground --data-root "$(DEMO_ROOT)"
	@echo "--- a sample from the trained model:"
	@./target/release/lavender-worker generate --data-root "$(DEMO_ROOT)" --checkpoint latest --prompt "ROMEO:"

lint: setup
	cargo fmt --all --check
	@$(TORCH_ENV) cargo clippy --workspace --all-targets -- -D warnings

test: setup lint
	@mkdir -p target; $(TORCH_ENV) cargo test --workspace 2>&1 | tee target/test.log; exit $${PIPESTATUS[0]}

# Benchmarks (not tests): status API, daemon overhead, detection latency, checkpoint
# I/O, trainer and interference; docs/BENCHMARKS.md records the results.
bench: setup
	@$(TORCH_ENV) bash bench/run-all.sh
