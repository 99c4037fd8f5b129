# The README's quick start: `make run` and `make test`. Both provision libtorch
# (.venv with torch==2.13.0) first; a LIBTORCH you export yourself wins.
SHELL := /bin/bash
.DEFAULT_GOAL := run

# libtorch for building the worker: the user's LIBTORCH, else the .venv's torch/.
TORCH_ENV = LIBTORCH="$${LIBTORCH:-$$(cat .venv/lib/torch-path)}"

.PHONY: run test lint setup build bench

setup:
	@bash scripts/setup-libtorch.sh
	@bash scripts/python-setup.sh

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

# pytest first (python/tests: the lavender-protocol package); its exit 5 (no test
# collected) is a failure like any other non-zero code. Then the Rust tests.
test: setup lint
	@mkdir -p target; .venv/bin/python -m pytest -q python/tests 2>&1 | tee target/pytest.log; \
	  py=$${PIPESTATUS[0]}; if [ "$$py" = 5 ]; then echo "pytest collected no test in python/tests" >&2; fi; \
	  $(TORCH_ENV) cargo test --workspace 2>&1 | tee target/test.log; rs=$${PIPESTATUS[0]}; \
	  if [ "$$py" != 0 ]; then echo "pytest failed (exit $$py): see target/pytest.log" >&2; exit $$py; fi; exit $$rs

# Benchmarks (not tests): status API, daemon overhead, detection latency, checkpoint
# I/O, trainer and interference; docs/BENCHMARKS.md records the results.
bench: setup
	@$(TORCH_ENV) bash bench/run-all.sh
