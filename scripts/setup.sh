#!/usr/bin/env bash
# Sets up a machine for Mooncake in Go, in two parts:
#   scripts/setup.sh          what `make run` needs: the Go toolchain check and Go modules, the
#                             project's virtualenv (.venv) with torch, numpy and matplotlib (the
#                             plot), and this package built from source (Go library, Go commands,
#                             torch shim).
#   scripts/setup.sh --test   that, and what `make test` adds: the servers the tests start
#                             (Debian's etcd-server, redis-server, prometheus; iproute2 and
#                             openssl), MinIO (built once with `go install`), pytest, and for the
#                             Rust bindings a Rust toolchain with clippy and rustfmt, libclang and
#                             the crates' dependencies (cargo fetch).
# Idempotent: a step already done is skipped. Every step prints the time it took.
set -euo pipefail
cd "$(dirname "$0")/.."

test_part=0
case "${1:-}" in
  "") ;;
  --test) test_part=1 ;;
  *) echo "usage: scripts/setup.sh [--test]" >&2; exit 2 ;;
esac

export PATH="/usr/local/go/bin:$PATH"
PY=${PYTHON:-python3}
VENV=.venv
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

# step WHAT FUNCTION: runs FUNCTION, then prints "setup: WHAT: 12.3 s" (with "already done" when
# FUNCTION set skipped=1: it found nothing to do).
skipped=0
step() {
  local what=$1; shift
  local t0=$EPOCHREALTIME
  skipped=0
  "$@"
  local dt
  dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  if [ "$skipped" = 1 ]; then
    echo "setup: $what: already done ($dt s)"
  else
    echo "setup: $what: $dt s"
  fi
}

# retry CMD...: runs a command that downloads (package registries), up to three times, so that a
# registry's passing hiccup does not fail a fresh machine's set-up.
retry() {
  local i
  for i in 1 2; do
    "$@" && return 0
    echo "setup: '$*' failed (try $i of 3); again in $((i * 10)) s" >&2
    sleep $((i * 10))
  done
  "$@"
}

# apt_install [--no-install-recommends] PACKAGE...: installs those of the Debian packages that
# are missing (skipped=1: none).
apt_install() {
  local opts=() need=() p
  [ "${1:-}" != --no-install-recommends ] || { opts+=("$1"); shift; }
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  if [ ${#need[@]} -eq 0 ]; then
    skipped=1
    return
  fi
  echo "setup: installing Debian packages: ${need[*]}"
  retry $SUDO apt-get update -qq
  retry $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${opts[@]}" "${need[@]}" >/dev/null
}

# ---- what `make run` needs ------------------------------------------------------------------

go_toolchain() {
  if ! command -v go >/dev/null; then
    echo "setup: Go 1.26 or newer is required (https://go.dev/dl); not found on PATH" >&2
    exit 1
  fi
  local gov
  gov=$(go env GOVERSION | sed 's/^go//')
  case "$gov" in
    1.2[6-9]*|1.[3-9]*|[2-9].*) ;;
    *) echo "setup: Go $gov is too old; go.mod needs 1.26" >&2; exit 1 ;;
  esac
  # Quiet and quick when the module cache has them all.
  GOPROXY=off go mod download 2>/dev/null && { skipped=1; return; }
  retry go mod download
}

# has_modules MODULE...: whether the virtualenv has them all (found, not imported: quick).
has_modules() {
  "$VENV/bin/python" - "$@" <<'PY' 2>/dev/null
import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))
PY
}

# The virtualenv and what the main job imports: torch (the job), numpy, matplotlib (the plot),
# and setuptools and wheel to build this package.
venv() {
  local new=0
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
    retry "$VENV/bin/python" -m pip install -q --upgrade pip
    new=1
  fi
  if has_modules torch numpy matplotlib setuptools wheel; then
    [ "$new" = 1 ] || skipped=1
    return
  fi
  retry "$VENV/bin/python" -m pip install -q torch numpy matplotlib setuptools wheel
}

# This package, built from source into the virtualenv: skipped when nothing it is built from
# changed since the last install (the stamp in the virtualenv hashes every file git does not
# ignore, the Go and torch versions and MOONCAKE_DEBUG_BUILD; outside a git checkout it always
# builds).
stamp_file="$VENV/.mooncake-build-stamp"
build_stamp() {
  git rev-parse --is-inside-work-tree >/dev/null 2>&1 || return 0
  {
    git ls-files -z --cached --others --exclude-standard | xargs -0 -r sha1sum
    go env GOVERSION
    "$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('torch'))"
    echo "MOONCAKE_DEBUG_BUILD=${MOONCAKE_DEBUG_BUILD:-}"
  } | sha1sum | cut -d' ' -f1
}
package() {
  local want
  want=$(build_stamp)
  if [ -n "$want" ] && [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$want" ] &&
     has_modules mooncake.engine; then
    skipped=1
    return
  fi
  rm -f "$stamp_file"
  "$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps .
  "$VENV/bin/python" -c "import mooncake.engine; print('setup: mooncake', mooncake.__version__, 'installed')"
  [ -z "$want" ] || echo "$want" >"$stamp_file"
}

# ---- what `make test` adds ------------------------------------------------------------------

# MinIO, the S3-compatible server the snapshot tests start: built once from the Go module proxy
# into $(go env GOPATH)/bin (a few minutes on a fresh machine), reused afterwards.
minio_server() {
  local gobin
  gobin="$(go env GOPATH)/bin"
  # type -P: a file on PATH (command -v would also find a shell function of that name)
  if type -P minio >/dev/null || [ -x "$gobin/minio" ]; then
    skipped=1
    return
  fi
  echo "setup: building MinIO for the S3 snapshot tests (once; a few minutes)"
  (cd /tmp && GOFLAGS= retry go install github.com/minio/minio@latest)
}

pytest_pkg() {
  if has_modules pytest; then
    skipped=1
    return
  fi
  retry "$VENV/bin/python" -m pip install -q pytest
}

# Rust bindings (rust/, `make test-rust`): a Rust toolchain with clippy and rustfmt, and libclang
# for bindgen. rustup's toolchain is used where there is one; otherwise Debian's (bookworm:
# rustc 1.63, the crates' rust-version; rust/Cargo.lock pins dependencies that build on it).
rust_toolchain() {
  local pkgs=() added=0
  if ! command -v cargo >/dev/null; then
    pkgs+=(cargo rustc rust-clippy rustfmt)
  elif command -v rustup >/dev/null; then
    rustup component list --installed 2>/dev/null | grep -q '^clippy' || { rustup component add clippy; added=1; }
    rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || { rustup component add rustfmt; added=1; }
  else
    cargo clippy --version >/dev/null 2>&1 || pkgs+=(rust-clippy)
    cargo fmt --version >/dev/null 2>&1 || pkgs+=(rustfmt)
  fi
  apt_install --no-install-recommends "${pkgs[@]}" libclang-dev
  [ "$added" = 0 ] || skipped=0
}

cargo_fetch() {
  if (cd rust && cargo fetch --locked --offline -q) 2>/dev/null; then
    skipped=1
    return
  fi
  (cd rust && retry cargo fetch --locked -q)
}

t_all=$EPOCHREALTIME
step "Go toolchain ($(command -v go >/dev/null && go env GOVERSION)) + Go modules" go_toolchain
step "venv + torch, numpy, matplotlib" venv
step "package (Go library, Go commands, torch shim)" package
if [ "$test_part" = 1 ]; then
  # gcc: tests/test_transfer_seam.py compiles its fault injector (tests/transfer_seam_preload.c)
  step "Debian packages for the tests (etcd-server, redis-server, prometheus, iproute2, openssl, gcc)" \
    apt_install etcd-server redis-server prometheus iproute2 openssl gcc
  step "MinIO" minio_server
  step "pytest" pytest_pkg
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
  step "Rust toolchain + libclang" rust_toolchain
  step "cargo fetch (rust/)" cargo_fetch
  echo "setup: $(cargo --version) with libclang for the Rust bindings (rust/)"
fi
echo "setup: done in $(awk -v a="$t_all" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
