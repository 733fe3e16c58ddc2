#!/usr/bin/env bash
# The CUDA checks, as one script for a machine with an NVIDIA GPU and a CUDA build of torch but
# possibly no Go toolchain: python/mooncake/libmooncake.so and python/mooncake/bin/mooncake are
# built beforehand (`make lib` or scripts/gpu_check.sh --prepare on a machine with Go) and travel
# with the tree. It builds the torch shim in place against the machine's torch (with CUDA), then
# runs every test that needs CUDA (they skip cleanly elsewhere) plus the process-group suite.
#   scripts/gpu_check.sh --prepare     # here (with Go): build the library and the commands
#   scripts/gpu_check.sh [pytest args] # there: build the shim, run the CUDA tests
# Logs go to $OUT (when set) or ./gpu_check_out.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--prepare" ]; then
  go build -trimpath -ldflags='-s -w' -buildmode=c-shared -o python/mooncake/libmooncake.so ./capi &&
  mkdir -p python/mooncake/bin .gpu &&
  go build -trimpath -ldflags='-s -w' -o python/mooncake/bin/mooncake ./cmd/mooncake &&
  tar -czf .gpu/bin.tgz python/mooncake/libmooncake.so python/mooncake/bin/mooncake   # carry .gpu
  exit $?
fi
OUTDIR=${OUT:-gpu_check_out}
mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
{
  date -u; nvidia-smi -L; "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
  if [ -f .gpu/bin.tgz ]; then tar -xzf .gpu/bin.tgz; fi   # the prepared build, when it travelled packed
  for c in mooncake_master mooncake_client transfer_engine_bench mooncake_http_metadata_server; do
    ln -sf mooncake python/mooncake/bin/$c   # the multi-call binary runs the command argv[0] names
  done
  rm -f python/mooncake/_pg_ext*.so
  MAX_JOBS=$(nproc) torchext/build_inplace.sh "$PY" > "$OUTDIR/shim_build.log" 2>&1 ||
    { grep -E 'error' "$OUTDIR/shim_build.log" | head -30; echo 'shim build failed'; exit 1; }
  PYTHONPATH=$PWD/python "$PY" -c 'import mooncake.pg as m; print("WITH_CUDA", m._pg_ext.WITH_CUDA)'
} 2>&1 | tee "$OUTDIR/build.log"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
tests=$(ls tests/test_*cuda*.py 2>/dev/null)
PATH=$PWD/python/mooncake/bin:$PATH PYTHONPATH=$PWD/python timeout 420 "$PY" -m pytest -q -rs -p no:cacheprovider \
  ${tests} tests/test_pg.py "$@" 2>&1 | tee "$OUTDIR/pytest.log"
exit ${PIPESTATUS[0]}
