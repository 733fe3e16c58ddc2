# Mooncake in Go. The two commands a fresh machine needs:
#   make run    set up what the main job needs (scripts/setup.sh: Go modules, .venv with torch
#               and matplotlib, this package built from source), then run it: DDP training and
#               an all_reduce sweep on mooncake-cpu and on gloo, side by side
#               (examples/ddp_train.py), and the plot
#   make test   set up that and the test bench (scripts/setup.sh --test: etcd, Redis,
#               Prometheus, iproute2, openssl, MinIO, pytest, the Rust toolchain, libclang,
#               cargo fetch), then run every test (go vet, Go with -race, pytest, cargo)
# Set-up is idempotent and prints the time of each step.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
# Go-installed tools (MinIO for the S3 tests) live in GOPATH/bin.
export PATH := $(shell go env GOPATH 2>/dev/null || echo $(HOME)/go)/bin:$(PATH)
VENV ?= .venv
PY := $(VENV)/bin/python
# Ranks of the main job: one per core of a 2-core machine (more ranks than cores make every
# backend wait on the scheduler; try NPROC=4 on a bigger host).
NPROC ?= 2

.PHONY: setup setup-run run examples test test-go test-py lib vet bench

# Everything (what `make test` needs; the tests' "make setup installs ..." hints mean this).
setup:
	./scripts/setup.sh --test

# Only what the main job and the examples need.
setup-run:
	./scripts/setup.sh

run: setup-run
	$(VENV)/bin/torchrun --standalone --nproc_per_node=$(NPROC) examples/ddp_train.py

# The small examples of the README (each prints one OK line per rank).
examples: setup-run
	$(VENV)/bin/torchrun --standalone --nproc_per_node=$(NPROC) examples/allreduce.py
	$(VENV)/bin/torchrun --standalone --nproc_per_node=$(NPROC) examples/alltoall.py
	$(VENV)/bin/torchrun --standalone --nproc_per_node=$(NPROC) examples/p2p.py

test: setup vet test-go test-py test-rust

vet:
	go vet ./...

test-go:
	go test -race -timeout 20m ./...
	go test -count=1 -run 'TestE2E|TestMismatchWithDataAhead' ./pg  # ring paths over p2p (other processes, other engines): that ordering is invisible to -race
	go test -count=1 ./internal/rawsys ./engine/transport/tcp ./store/api  # raw socket system calls (package rawsys): a -race build makes the ordinary ones

test-py:
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q tests

# Developer conveniences (no set-up).
lib:
	go build -ldflags=-extldflags=-Wl,-soname,libmooncake.so -buildmode=c-shared -o python/mooncake/libmooncake.so ./capi && rm -f python/mooncake/libmooncake.h
	faultseam/build.sh python/mooncake

bench:
	./bench/engine_bench.sh

# Rust bindings (rust/: the mooncake_store and mooncake_transfer_engine crates, transfer_engine_bench):
# unit and integration tests against this tree's libmooncake.so and Go commands (built by setup),
# then clippy and rustfmt. See docs/rust.md.
# cargo: the one on PATH (Debian's after setup), else rustup's in ~/.cargo/bin.
.PHONY: test-rust
CARGO_PATH = PATH="$$PATH:$$HOME/.cargo/bin"
test-rust:
	cd rust && $(CARGO_PATH) cargo test --locked
	cd rust && $(CARGO_PATH) cargo clippy --locked --all-targets -- -D warnings
	cd rust && $(CARGO_PATH) cargo fmt --check

# Upstream Mooncake PG's own tests (mooncake-pg/tests, a scratch copy outside the repository:
# docs/elastic.md), against this tree's .venv; root (network namespaces). Not part of `test`.
.PHONY: upstream-pg-suite
upstream-pg-suite: setup
	@test -n "$(UPSTREAM_PG_TESTS)" || { echo "set UPSTREAM_PG_TESTS=/path/to/mooncake-pg/tests (git -C MIRROR archive HEAD mooncake-pg | tar -x)"; exit 2; }
	python3 scripts/upstream_pg_suite.py --tests "$(UPSTREAM_PG_TESTS)" --python $(VENV)/bin/python
