#!/usr/bin/env bash
# The Rust transfer_engine_bench against the Go one on one host: each target (Go, Rust) serves,
# and the Go and the Rust initiators take turns against it (write and read, over shm and over
# tcp with MC_FORCE_TCP=1), ROUNDS times; per line the medians and the median of the per-round
# Rust/Go ratios (each round's two runs are back to back, so a ratio compares like with like on
# a machine whose load changes).
#
#   rust/scripts/engine_bench.sh                          # bench defaults: 64 KiB blocks, batch 128
#   BLOCK=1048576 BATCH=8 DURATION=3 ROUNDS=5 rust/scripts/engine_bench.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BLOCK=${BLOCK:-65536} BATCH=${BATCH:-128} THREADS=${THREADS:-1}
BUFFER=${BUFFER:-268435456} DURATION=${DURATION:-3} ROUNDS=${ROUNDS:-5}
OPS=${OPS:-"write read"} TRANSPORTS=${TRANSPORTS:-"shm tcp"}

GO="$ROOT/build/bin/transfer_engine_bench"
(cd "$ROOT" && go build -o "$GO" ./cmd/transfer_engine_bench)
(cd "$ROOT/rust" && cargo build -q --release --bin transfer_engine_bench)
RUST="$ROOT/rust/target/release/transfer_engine_bench"

TMP=$(mktemp -d)
tpid=""
trap '[ -n "$tpid" ] && kill $tpid 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
rate() { sed -n 's/.*throughput \([0-9.]*\) GB\/s.*/\1/p' | tail -1; }
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "block $BLOCK B, batch $BATCH, threads $THREADS, buffer $BUFFER B, $DURATION s per run, $ROUNDS rounds, $(nproc) cores"
printf '| %-6s | %-9s | %-5s | %-30s | %-30s | %-26s |\n' target transport op "Go initiator GB/s (median)" "Rust initiator GB/s (median)" "Rust/Go (median of rounds)"
printf '|--------|-----------|-------|--------------------------------|--------------------------------|----------------------------|\n'
for tgt in go rust; do
    bin=$GO; [ "$tgt" = rust ] && bin=$RUST
    : >"$TMP/target"
    "$bin" --mode=target --local_server_name=127.0.0.1 --buffer_size="$BUFFER" >"$TMP/target" &
    tpid=$!
    seg=""
    for _ in $(seq 1 600); do
        seg=$(awk '/^READY/{print $2}' "$TMP/target"); [ -n "$seg" ] && break; sleep 0.1
    done
    [ -n "$seg" ] || { echo "$tgt target did not start" >&2; exit 1; }
    for tr in $TRANSPORTS; do
        force=0; [ "$tr" = tcp ] && force=1
        for op in $OPS; do
            g="" r=""
            for i in $(seq "$ROUNDS"); do
                args=(--mode=initiator --segment_id="$seg" --local_server_name=127.0.0.1 --operation="$op"
                      --block_size="$BLOCK" --batch_size="$BATCH" --threads="$THREADS" --buffer_size="$BUFFER"
                      --duration="$DURATION")
                # alternate which initiator goes first
                if [ $((i % 2)) = 1 ]; then
                    g="$g $(MC_FORCE_TCP=$force "$GO" "${args[@]}" | tee -a "$TMP/lines" | rate)"
                    r="$r $(MC_FORCE_TCP=$force "$RUST" "${args[@]}" | tee -a "$TMP/lines" | rate)"
                else
                    r="$r $(MC_FORCE_TCP=$force "$RUST" "${args[@]}" | tee -a "$TMP/lines" | rate)"
                    g="$g $(MC_FORCE_TCP=$force "$GO" "${args[@]}" | tee -a "$TMP/lines" | rate)"
                fi
            done
            gm=$(echo "$g" | median) rm=$(echo "$r" | median)
            ratios=$(paste <(echo "$g" | tr ' ' '\n' | sed '/^$/d') <(echo "$r" | tr ' ' '\n' | sed '/^$/d') |
                     awk '{printf " %.2f", $2 / $1}')
            printf '| %-6s | %-9s | %-5s | %-30s | %-30s | %-26s |\n' "$tgt" "$tr" "$op" \
                "$gm (runs:$g)" "$rm (runs:$r)" "$(echo "$ratios" | median) (${ratios# })"
        done
    done
    kill $tpid; wait $tpid 2>/dev/null || true; tpid=""
done
echo "sample output lines (the two benches print the same line):"; sort -u "$TMP/lines" | head -2 | sed "s/^/  /"
