#!/usr/bin/env bash
# The CUDA device check, one script for a machine with an NVIDIA GPU, a CUDA build of torch, g++,
# ninja and pytest but no Go and no network (docs/cuda.md). Three modes:
#   scripts/gpu_check.sh --prepare   # here (with Go): the library and the multi-call binary,
#                                    # packed into .gpu/bin.tgz (carry .gpu; about 20 MB)
#   scripts/gpu_check.sh --dry-run   # here: every step's command, and the CPU-side checks of
#                                    # the plan (tests/test_gpu_check.py runs it in `make test`)
#   scripts/gpu_check.sh             # there: runs the steps below, about 6 minutes on an H100
# Steps there (each with its own time limit; logs and report.md go to $OUT, or ./gpu_check_out):
#   facts    the machine, torch, compiler and libstdc++
#   build    only the torch shim, in place, against that torch (torchext/build_inplace.sh)
#   stdcxx   scripts/stdcxx_probe.py: string ABI of torch and shim, where the shim's libstdc++
#            references bind, the formatting probe that crashed on the H200
#   tests    the CUDA tests: process groups (2 and 4 ranks on one GPU, every op, 4 dtypes, exact
#            against CPU), a DDP step, CUDA staging, the CPU error paths that crashed, the
#            engine's and the store's CUDA tensor tests, the same-host device path (CUDA IPC) at
#            2 and 4 ranks and with staging forced (tests/test_pg_ipc.py)
#   bench    bench/pgbench.py --device cuda all_reduce 8 B-256 MiB, mooncake (same-host device
#            path on, the default) and nccl alternated, with the GPU's device-to-device copy
#            bandwidth as the bound (nccl alone when it cannot share one GPU between ranks is
#            said so in the report); then mooncake with staging forced (MOONCAKE_PG_CUDA_IPC=0)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUTDIR=${OUT:-gpu_check_out}
TESTS="tests/test_pg_cuda.py tests/test_engine_cuda.py tests/test_store_tensor_cuda.py"
TESTS="$TESTS tests/test_pg.py::test_cuda_staging tests/test_pg.py::test_ops_matrix[2]"
TESTS="$TESTS tests/test_pg_ipc.py::test_cuda_path_matches_cpu"
BENCH="bench/pgbench.py --device cuda --collective all_reduce -b 8 -e 256M -f 32 -g 2 -n 10 -w 2 -r 3"
BENCH_STAGING="bench/pgbench.py --device cuda --collective all_reduce -b 8 -e 256M -f 32 -g 2 -n 10 -w 2 -r 1"
PREPARE=(
  "go build -trimpath -ldflags=-s\\ -w\\ -extldflags=-Wl,-soname,libmooncake.so -buildmode=c-shared -o python/mooncake/libmooncake.so ./capi"
  "go build -trimpath -ldflags=-s\\ -w -o python/mooncake/bin/mooncake ./cmd/mooncake"
  "tar -czf .gpu/bin.tgz python/mooncake/libmooncake.so python/mooncake/bin/mooncake"
)

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p python/mooncake/bin .gpu || exit 1
  for c in "${PREPARE[@]}"; do
    echo "+ $c"
    eval "$c" || exit 1
  done
  rm -f python/mooncake/libmooncake.h
  ls -l .gpu/bin.tgz
  exit 0
fi

if [ "${1:-}" = "--dry-run" ]; then
  # What runs there, without a GPU: the plan, and each CPU-side part checked for real.
  set -e
  echo "prepare:"; for c in "${PREPARE[@]}"; do echo "  $c"; done
  test -f python/mooncake/libmooncake.so || { echo "dry-run: no python/mooncake/libmooncake.so (run make lib or --prepare)"; exit 1; }
  test -f torchext/pg_ext.map
  echo "build: MAX_JOBS=\$(nproc) torchext/build_inplace.sh $PY"
  "$PY" - <<'PYEOF'
import sys
sys.path.insert(0, "torchext")
import build as tb
(e,) = tb.ext_modules(relative=False)
print("  sources:", " ".join(s.split("/")[-1] for s in e.sources))
print("  libraries:", " ".join(e.libraries))
print("  compile:", " ".join(tb.COMPILE_ARGS))
print("  link:", " ".join(tb.link_args()))
assert e.libraries[0] == "stdc++", e.libraries
assert "-fvisibility=hidden" in tb.COMPILE_ARGS
PYEOF
  echo "stdcxx: $PY scripts/stdcxx_probe.py --json \$OUT/stdcxx.json"
  "$PY" scripts/stdcxx_probe.py --strict --json "${DRY_JSON:-/dev/null}" > "${TMPDIR:-/tmp}/gpu_check_dry_stdcxx.log" 2>&1 ||
    { cat "${TMPDIR:-/tmp}/gpu_check_dry_stdcxx.log"; echo "dry-run: stdcxx probe failed"; exit 1; }
  grep -E "format probe|bound outside" "${TMPDIR:-/tmp}/gpu_check_dry_stdcxx.log" | sed 's/^/  /'
  echo "tests: $PY -m pytest -q -rs $TESTS"
  "$PY" -m pytest -q --collect-only -p no:cacheprovider $TESTS | tail -1 | sed 's/^/  /'
  echo "bench: $PY $BENCH --backend mooncake,nccl --json \$OUT/pgbench_cuda.json"
  echo "bench: MOONCAKE_PG_CUDA_IPC=0 $PY $BENCH_STAGING --backend mooncake --json \$OUT/pgbench_cuda_staging.json"
  "$PY" bench/pgbench.py --help | grep -q -- "--device" && echo "  pgbench has --device"
  echo "dry-run OK"
  exit 0
fi

mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python PATH=$PWD/python/mooncake/bin:$PATH
REPORT="$OUTDIR/report.md"
status() { echo "- $1: $2" >> "$REPORT"; echo "gpu_check: $1: $2"; }
# A step's time limit: its own, or what is left of the whole run's 470 s (under 8 minutes).
lim() { local left=$((470 - SECONDS)); if [ "$left" -lt "$1" ]; then echo $((left > 5 ? left : 5)); else echo "$1"; fi; }
echo "# GPU check $(date -u +%Y-%m-%dT%H:%MZ)" > "$REPORT"

# facts
{
  date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "cxx11abi", torch._C._GLIBCXX_USE_CXX11_ABI)'
  g++ --version | head -1; nvcc --version | tail -1; ldd --version | head -1
  "$PY" -c 'import ctypes, torch; print([l.split()[-1] for l in open("/proc/self/maps") if "libstdc++" in l][0])'
  cat /etc/os-release | head -2
} > "$OUTDIR/facts.log" 2>&1
sed 's/^/    /' "$OUTDIR/facts.log" >> "$REPORT"

# build (only the shim; the library and the command travel prepared)
if [ -f .gpu/bin.tgz ]; then tar -xzf .gpu/bin.tgz; fi
for c in mooncake_master mooncake_client transfer_engine_bench mooncake_http_metadata_server; do
  ln -sf mooncake python/mooncake/bin/$c   # the multi-call binary runs the command argv[0] names
done
rm -f python/mooncake/_pg_ext*.so
if MAX_JOBS=$(nproc) timeout "$(lim 240)" torchext/build_inplace.sh "$PY" > "$OUTDIR/shim_build.log" 2>&1; then
  status build "OK ($("$PY" -c 'import mooncake.pg as m; print("WITH_CUDA", m._pg_ext.WITH_CUDA)' 2>&1))"
else
  status build "FAILED (shim_build.log)"; grep -E 'error' "$OUTDIR/shim_build.log" | head -20
  exit 1
fi

# stdcxx
timeout "$(lim 90)" "$PY" scripts/stdcxx_probe.py --json "$OUTDIR/stdcxx.json" > "$OUTDIR/stdcxx.log" 2>&1
status stdcxx "rc=$? ($(grep -E 'format probe' "$OUTDIR/stdcxx.log" | sed 's/.*-> //'); $(grep -E 'bound outside' "$OUTDIR/stdcxx.log" | sed 's/.*: //') shim references bound outside libstdc++)"
sed 's/^/    /' "$OUTDIR/stdcxx.log" | cut -c1-300 >> "$REPORT"

# tests
timeout "$(lim 330)" "$PY" -m pytest -q -rs -p no:cacheprovider $TESTS > "$OUTDIR/pytest.log" 2>&1
rc_tests=$?
status tests "rc=$rc_tests: $(tail -1 "$OUTDIR/pytest.log")"
grep -E "^(FAILED|ERROR|SKIPPED)" "$OUTDIR/pytest.log" | head -20 | sed 's/^/    /' >> "$REPORT"

# bench: mooncake and nccl alternated; nccl refuses two ranks on one GPU, then each alone
if timeout "$(lim 150)" "$PY" $BENCH --backend mooncake,nccl -q --json "$OUTDIR/pgbench_cuda.json" > "$OUTDIR/pgbench.log" 2>&1; then
  status bench "mooncake,nccl alternated (pgbench.log)"
else
  why=$(grep -m1 -E 'Duplicate GPU|ncclInvalidUsage|NCCL error|pgbench: |Error: ' "$OUTDIR/pgbench.log" | cut -c1-200)
  cp "$OUTDIR/pgbench.log" "$OUTDIR/pgbench_with_nccl.log"
  status bench "mooncake,nccl together failed (${why:-see pgbench_with_nccl.log}); mooncake alone"
  timeout "$(lim 100)" "$PY" $BENCH --backend mooncake -q --json "$OUTDIR/pgbench_cuda.json" > "$OUTDIR/pgbench.log" 2>&1 ||
    status bench "mooncake alone failed too"
fi
sed 's/^/    /' "$OUTDIR/pgbench.log" | grep -v "^    pgbench:" | tail -12 >> "$REPORT"

# bench with staging forced: the same sizes through host memory, for the path's gain
if MOONCAKE_PG_CUDA_IPC=0 timeout "$(lim 90)" "$PY" $BENCH_STAGING --backend mooncake -q \
    --json "$OUTDIR/pgbench_cuda_staging.json" > "$OUTDIR/pgbench_staging.log" 2>&1; then
  status bench-staging "mooncake with MOONCAKE_PG_CUDA_IPC=0 (pgbench_staging.log)"
else
  status bench-staging "failed (pgbench_staging.log)"
fi
sed 's/^/    /' "$OUTDIR/pgbench_staging.log" | grep -v "^    pgbench:" | tail -8 >> "$REPORT"
cat "$REPORT"
exit $rc_tests
