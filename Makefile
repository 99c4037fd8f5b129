# The two commands of the README's quick start: `make run` and `make test`.
# Both provision libtorch (.venv with torch==2.13.0) first; a LIBTORCH you set wins.
SHELL := /bin/bash
.DEFAULT_GOAL := run

VENV_TORCH := $(shell cat .venv/lib/torch-path 2>/dev/null)
export LIBTORCH ?= $(VENV_TORCH)
export LIBTORCH_BYPASS_VERSION_CHECK ?= 0

.PHONY: run test lint setup build build-worker bench

setup:
	@bash scripts/setup-libtorch.sh

# Re-read the torch path after setup so a first run sees the fresh .venv.
build: setup
	@LIBTORCH="$${LIBTORCH:-$$(cat .venv/lib/torch-path)}" cargo build --release --workspace

run: build
	@./target/release/lavenderd config check

lint: setup
	cargo fmt --all --check
	@LIBTORCH="$${LIBTORCH:-$$(cat .venv/lib/torch-path)}" cargo clippy --workspace --all-targets -- -D warnings

test: setup lint
	@mkdir -p target; LIBTORCH="$${LIBTORCH:-$$(cat .venv/lib/torch-path)}" cargo test --workspace 2>&1 | tee target/test.log; exit $${PIPESTATUS[0]}
