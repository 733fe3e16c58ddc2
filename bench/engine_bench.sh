#!/usr/bin/env bash
# Transfer engine benchmark on one host: shm and tcp (MC_FORCE_TCP=1) WRITE/READ against
# single-thread memcpy and a plain Go loopback socket copy of the same block size, all in
# one run. Prints a table with ratios.
#
#   bench/engine_bench.sh                       # 64 MiB blocks, 5 s per measurement
#   BLOCK=1048576 DURATION=3 bench/engine_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BLOCK=${BLOCK:-67108864}
BUFFER=${BUFFER:-536870912}
BATCH=${BATCH:-4}
THREADS=${THREADS:-1}
DURATION=${DURATION:-5}
OPS=${OPS:-"write read"}
BIN=${BIN:-$(mktemp -d)/transfer_engine_bench}

go build -o "$BIN" ./cmd/transfer_engine_bench 2>/dev/null || go build -o "$BIN" ./cmd/transfer_engine_bench

out=$(mktemp)
"$BIN" --mode=target --local_server_name=127.0.0.1 --buffer_size="$BUFFER" >"$out" &
tpid=$!
trap 'kill $tpid 2>/dev/null || true; wait $tpid 2>/dev/null || true; rm -f "$out"' EXIT
seg=""
for _ in $(seq 1 600); do
  seg=$(awk '/^READY/{print $2}' "$out")
  [ -n "$seg" ] && break
  sleep 0.1
done
[ -n "$seg" ] || { echo "target did not start" >&2; exit 1; }

rate() { sed -n 's/.*throughput \([0-9.]*\) GB\/s.*/\1/p' | tail -1; }
common=(--segment_id="$seg" --local_server_name=127.0.0.1 --block_size="$BLOCK" --batch_size="$BATCH"
        --buffer_size="$BUFFER" --threads="$THREADS" --duration="$DURATION" --report_unit=GB)

# Baselines are measured before and after the engine runs; the larger value is used, so
# noise on a shared machine makes the ratios conservative, not flattering.
baseline() { "$BIN" --mode=baseline --block_size="$BLOCK" --buffer_size="$BUFFER" --duration="$DURATION" --report_unit=GB; }
fmax() { echo "if ($1 > $2) $1 else $2" | bc -l; }
base=$(baseline)
memcpy=$(echo "$base" | grep '^memcpy' | rate)
sock=$(echo "$base" | grep '^socket' | rate)
declare -A res
for op in $OPS; do
  res[shm_$op]=$(MC_FORCE_TCP=0 "$BIN" --mode=initiator --operation="$op" "${common[@]}" | rate)
  res[tcp_$op]=$(MC_FORCE_TCP=1 "$BIN" --mode=initiator --operation="$op" "${common[@]}" | rate)
done
base=$(baseline)
memcpy=$(fmax "$memcpy" "$(echo "$base" | grep '^memcpy' | rate)")
sock=$(fmax "$sock" "$(echo "$base" | grep '^socket' | rate)")

printf '\nblock %d B, batch %d, threads %d, %s s per run, target %s\n\n' "$BLOCK" "$BATCH" "$THREADS" "$DURATION" "$seg"
printf '| %-18s | %10s | %-28s | %6s |\n' "measurement" "GB/s" "baseline" "ratio"
printf '|%s|%s|%s|%s|\n' "--------------------" "------------" "------------------------------" "--------"
printf '| %-18s | %10.2f | %-28s | %6s |\n' "memcpy (1 thread)" "$memcpy" "best of 2 runs" "-"
printf '| %-18s | %10.2f | %-28s | %6s |\n' "Go socket copy" "$sock" "best of 2 runs" "-"
for op in $OPS; do
  shm=${res[shm_$op]}
  tcp=${res[tcp_$op]}
  printf '| %-18s | %10s | %-28s | %5.0f%% |\n' "shm $op" "$shm" "memcpy $(printf %.2f "$memcpy")" "$(echo "100*$shm/$memcpy" | bc -l)"
  printf '| %-18s | %10s | %-28s | %5.0f%% |\n' "tcp $op" "$tcp" "socket $(printf %.2f "$sock")" "$(echo "100*$tcp/$sock" | bc -l)"
done
