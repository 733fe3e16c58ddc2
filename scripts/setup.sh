#!/usr/bin/env bash
# Sets up a fresh machine for Mooncake in Go: Debian packages the tests use, the Go toolchain
# check, the project's virtualenv (.venv) with torch and matplotlib (the plots), and the package
# itself built from source.
# Idempotent: steps already done are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="/usr/local/go/bin:$PATH"
PY=${PYTHON:-python3}
VENV=.venv

need_pkgs=()
for p in etcd-server redis-server prometheus iproute2 openssl; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
  echo "setup: Go 1.26 or newer is required (https://go.dev/dl); not found on PATH" >&2
  exit 1
fi
gov=$(go env GOVERSION | sed 's/^go//')
case "$gov" in
  1.2[6-9]*|1.[3-9]*|[2-9].*) ;;
  *) echo "setup: Go $gov is too old; go.mod needs 1.26" >&2; exit 1 ;;
esac
go mod download

# MinIO, the S3-compatible server the snapshot tests start: built once from the Go module
# proxy into $(go env GOPATH)/bin (a few minutes on a fresh machine), reused afterwards.
gobin="$(go env GOPATH)/bin"
if ! command -v minio >/dev/null && [ ! -x "$gobin/minio" ]; then
  echo "setup: building MinIO for the S3 snapshot tests (once; a few minutes)"
  (cd /tmp && GOFLAGS= go install github.com/minio/minio@latest)
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -c "import torch, numpy, pytest, setuptools, wheel, matplotlib" 2>/dev/null ||
  "$VENV/bin/python" -m pip install -q torch numpy pytest setuptools wheel matplotlib

echo "setup: building and installing mooncake-transfer-engine (Go library, commands, torch shim)"
"$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps .
"$VENV/bin/python" -c "import mooncake.engine; print('setup: mooncake', mooncake.__version__, 'installed')"

# Rust bindings (rust/, `make test-rust`): a Rust toolchain with clippy and rustfmt, and libclang
# for bindgen. rustup's toolchain is used where there is one; otherwise Debian's (bookworm:
# rustc 1.63, the crates' rust-version; rust/Cargo.lock pins dependencies that build on it).
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
rust_pkgs=()
if ! command -v cargo >/dev/null; then
  rust_pkgs+=(cargo rustc rust-clippy rustfmt)
elif command -v rustup >/dev/null; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
else
  cargo clippy --version >/dev/null 2>&1 || rust_pkgs+=(rust-clippy)
  cargo fmt --version >/dev/null 2>&1 || rust_pkgs+=(rustfmt)
fi
dpkg -s libclang-dev >/dev/null 2>&1 || rust_pkgs+=(libclang-dev)
if [ ${#rust_pkgs[@]} -gt 0 ]; then
  echo "setup: installing Debian packages for the Rust bindings: ${rust_pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${rust_pkgs[@]}" >/dev/null
fi
(cd rust && cargo fetch --locked -q)
echo "setup: $(cargo --version) with libclang for the Rust bindings (rust/)"
