# The README's quick start: `make run`, `make install` and `make test`. They provision
# libtorch (.venv with torch==2.13.0) first; a LIBTORCH you export yourself wins.
SHELL := /bin/bash
.DEFAULT_GOAL := run

# libtorch for building the worker: the user's LIBTORCH, else the .venv's torch/.
TORCH_ENV = LIBTORCH="$${LIBTORCH:-$$(cat .venv/lib/torch-path)}"

# Where `make install` puts lavenderd and lavender-worker (PREFIX/bin).
PREFIX ?= $(HOME)/.local

.PHONY: run test test-run test-repeat test-gpu test-attribution lint fmt clippy test-build prebuild libtorch setup build install uninstall bench

# libtorch is all a build needs; the Python tools (lavender-protocol, pytest,
# transformers) are for the tests.
libtorch:
	@bash scripts/setup-libtorch.sh

setup: libtorch
	@bash scripts/python-setup.sh

# Release binaries carry no test switch: the `test-hooks` cargo feature (worker
# `train --hold-save`, `LAVENDER_PROGRESS_INTERVAL_MS`; `lavenderd serve
# --simulate-inotify-exhausted`) is on only where a package's tests are built, through
# its dev-dependency on itself (daemon/Cargo.toml, worker/Cargo.toml): test-build,
# test-run and a plain `cargo test -p <pkg>` have it, build and install do not.
# Only the two programs `install` uses: the benches, the load generator and the test
# kit are built by what uses them (bench/setup.sh, the test build).
build: libtorch
	@$(TORCH_ENV) cargo build --release -p lavenderd -p lavender-worker

# The demo trains into the data root every lavenderd command finds by itself, from
# any folder (docs/OPERATIONS.md, "Which data root"): the per-user data folder
# ($XDG_DATA_HOME/lavender, ~/.local/share/lavender; ~/Library/Application
# Support/lavender on macOS), or a data-root/ folder here when there is one (an older
# checkout's demo). `start` says which on its first line. Run again after Ctrl-C, it
# resumes from the newest checkpoint (`start` refuses to start over silently while a
# run could be resumed); run again after it finished, it says there is nothing to do.
# The same two programs as `build`, with the `demo` profile (Cargo.toml) into
# target/demo: only the code the demo spends its time in (the worker, tokenizers, the
# regex crates, hashing) is optimized, the rest is built at opt-level 0. A fresh build
# takes under half the release build's time on 2 cores and the demo runs as fast
# (docs/BENCHMARKS.md, row 12); `make install` builds and installs the release ones.
run: libtorch
	@$(TORCH_ENV) cargo build --profile demo -p lavenderd -p lavender-worker
	@resume=$$(./target/demo/lavenderd runs --json 2>/dev/null | grep -q '"checkpoints": [1-9]' && echo "--resume latest"); \
		./target/demo/lavenderd start --scale tiny --foreground $$resume
	@echo "--- a sample from the trained model:"
	@./target/demo/lavender-worker generate --checkpoint latest --prompt "ROMEO:"

install: build
	@bash scripts/install.sh install "$(PREFIX)" target/release

uninstall:
	@bash scripts/install.sh uninstall "$(PREFIX)"

fmt:
	cargo fmt --all --check
	.venv/bin/ruff format --check --quiet .

clippy: libtorch
	@$(TORCH_ENV) cargo clippy --workspace --all-targets -- -D warnings

lint: fmt clippy

# The test build is also the lint: clippy-driver wraps rustc for the workspace's own
# crates (as `cargo clippy` does; CLIPPY_ARGS is how it takes `-D warnings`), so a
# warning fails the build and dependencies compile once instead of once per command.
LINTED = RUSTC_WORKSPACE_WRAPPER=clippy-driver CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__

# Builds every test binary without running it (CI times this apart from the run).
test-build: libtorch
	@$(TORCH_ENV) $(LINTED) cargo test --workspace --no-run

# What of test-build compiles without libtorch (.ci/run runs it while pip installs
# libtorch, with LIBTORCH naming a folder not there yet): torch-sys and what needs it
# fail, the rest is fresh for test-build.
prebuild:
	@$(TORCH_ENV) $(LINTED) cargo build --workspace --tests --keep-going

test: setup fmt test-build test-run

# The Rust suite with pytest and the Slurm tests beside it, then the default pipeline's
# attribution test alone (scripts/test-run.sh).
test-run: setup
	@$(TORCH_ENV) $(LINTED) bash scripts/test-run.sh

# The fast unit tests (every package's `--lib` test binary, the paused-clock pipeline
# actor tests included) N times in a row on one build, each failing test printed by
# name with how often it failed; exits non-zero if any run failed
# (scripts/test-repeat.sh; .ci/run runs it 5 times). ALONE=1 runs every unit test
# alone instead, a process per test (`--exact`, as a test's own filter runs it),
# N times each (default 1). JOBS (default 4) processes run at once.
#   make test-repeat N=25        make test-repeat ALONE=1
test-repeat: libtorch
	@$(TORCH_ENV) $(LINTED) bash scripts/test-repeat.sh $(if $(filter 1 yes true,$(ALONE)),--alone) $(N)

# Training on a CUDA GPU (scripts/test-gpu.sh, worker/tests/gpu.rs): bf16 steps, a
# resume within CUDA's rounding, steps/s beside PyTorch. Not part of `make test`;
# fails at once on a machine without a usable CUDA device.
test-gpu: setup
	@$(TORCH_ENV) bash scripts/test-gpu.sh

# Attribution on the default pipeline (worker/tests/attribution_default.rs): `start
# --scale tiny`, `export --all`, `attribute` with a verbatim training window, which
# must rank its document first, then a second query on the cached Hessian passes.
# `make test` runs the same test at two exported checkpoints on a sample of 929
# windows (`--windows 1000`); this one, at all five and all 5,574 windows, is not
# part of it.
test-attribution: setup
	@bash scripts/attribution-setup.sh
	@$(TORCH_ENV) cargo build -p lavenderd
	@$(TORCH_ENV) cargo test -p lavender-worker --features attribution-tests --test attribution_default -- --nocapture at_every_checkpoint

# Benchmarks (not tests): status API, daemon overhead, detection latency, checkpoint
# I/O, trainer and interference; docs/BENCHMARKS.md records the results.
bench: setup
	@$(TORCH_ENV) bash bench/run-all.sh
