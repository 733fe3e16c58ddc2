#!/usr/bin/env bash
# Rust store client vs the Python client, 1 MiB sequential put/get, in one run against the same
# mooncake_master and mooncake_client (flags as in bench/store_bench.py). Rounds alternate Rust
# and Python so both see the same machine load.
#
#   rust/scripts/store_bench.sh [ROUNDS] [SIZE] [N]      # defaults 7 1048576 1000
#
# Prints every run, the median per client and method, and the median of the per-round
# Rust/Python ratios for put and get (a round's runs are back to back, so a ratio compares like
# with like on a machine whose load changes).
#
# Needs `make lib` and the Go commands in python/mooncake/bin (make setup), and builds the
# store_bench example in release mode.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ROUNDS="${1:-7}" SIZE="${2:-1048576}" N="${3:-1000}"
BIN="$ROOT/python/mooncake/bin"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

(cd "$ROOT/rust" && cargo build -q --release --example store_bench)
RPC=$(port)
LOG=$(mktemp -d)
cleanup() { kill "${CLIENT_PID:-}" "${MASTER_PID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$LOG"; }
trap cleanup EXIT
: >"$LOG/master"; : >"$LOG/client"
"$BIN/mooncake_master" --rpc_port="$RPC" --metrics_port="$(port)" --rpc_address=127.0.0.1 \
    --enable_metric_reporting=false >"$LOG/master" 2>/dev/null &
MASTER_PID=$!
until grep -q MOONCAKE_MASTER_READY "$LOG/master"; do sleep 0.1; done
"$BIN/mooncake_client" --master_server_address="127.0.0.1:$RPC" --port=0 --host=127.0.0.1 \
    --global_segment_size="1.5 GB" --local_buffer_size="64 MB" >"$LOG/client" 2>/dev/null &
CLIENT_PID=$!
until grep -q MOONCAKE_CLIENT_READY "$LOG/client"; do sleep 0.1; done

echo "machine: $(nproc) cores; value $SIZE bytes, n=$N, replica_num=1, values on a mooncake_client process"
for r in $(seq "$ROUNDS"); do
    "$ROOT/rust/target/release/examples/store_bench" --master="127.0.0.1:$RPC" --size="$SIZE" --n="$N"
    PYTHONPATH="$ROOT/python" python3 - "127.0.0.1:$RPC" "$SIZE" "$N" <<'PY'
import os, sys, time
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
addr, size, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 128 << 20, "tcp", "", addr) == 0
cfg = ReplicateConfig(replica_num=1)
val = os.urandom(size)
keys = [f"pb/{size}/{i}" for i in range(n)]
s.put("py-warm", val[:4096]); s.get("py-warm")
def rep(what, t):
    print(f"python {what:<8} size={size} n={n} {n / t:9.0f} op/s {n * size / t / 2**30:6.2f} GiB/s")
t0 = time.perf_counter()
for k in keys:
    assert s.put(k, val, cfg) == 0
rep("put", time.perf_counter() - t0)
t0 = time.perf_counter()
for k in keys:
    assert len(s.get(k)) == size
rep("get", time.perf_counter() - t0)
s.remove_all()
s.close()
PY
done | tee "$LOG/rows"
echo "median over $ROUNDS rounds:"
# columns: client method size= n= OPS op/s GIBS GiB/s
awk '{k=$1" "$2; v[k]=v[k]" "$5; g[k]=g[k]" "$7} END {for (k in v) print k, v[k], "|", g[k]}' "$LOG/rows" | sort |
while read -r client method rest; do
    ops=$(echo "${rest%%|*}" | tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    gib=$(echo "${rest##*|}" | tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf '  %-7s %-24s %7s op/s %6s GiB/s\n' "$client" "$method" "$ops" "$gib"
done
echo "Rust/Python, median of the per-round ratios:"
awk '$1 == "rust" && $2 == "put" {r++} {v[$1 " " $2 " " r] = $5}
     END {for (i = 1; i <= r; i++) {print "put", v["rust put " i] / v["python put " i]; print "get", v["rust get " i] / v["python get " i]}}' "$LOG/rows" |
while read -r m x; do echo "$m $x"; done | sort -k1,1 -k2n | awk '{a[$1] = a[$1] " " sprintf("%.2f", $2); n[$1]++; s[$1, n[$1]] = $2}
     END {for (m in n) printf "  %s %.2f (sorted:%s)\n", m, s[m, int((n[m] + 1) / 2)], a[m]}'
