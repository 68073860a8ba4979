#!/bin/bash
# Compares feeder coalescing waits (event_batch_max_delay_us) with felix-bench in one
# script: for each delay D it starts felix-broker (lossless profile) on 127.0.0.1, runs
# latency and throughput cells with 1 KiB payloads at fanout 1 and 10, 3 runs each, and
# stops it. JSON lines go to $OUTDIR/results.jsonl.
# usage: bench/compare-delay.sh [BUILD_DIR] [DELAY_US...]   (default: build/release 250 0)
set -euo pipefail
B=${1:-build/release}
shift || true

if [ $# -eq 0 ]; then DELAYS=(250 0); else DELAYS=("$@"); fi
OUTDIR=${OUTDIR:-/tmp/felix-compare-delay}
PORT=${PORT:-25000}; ADMIN=${ADMIN:-28080}
rm -rf "$OUTDIR"; mkdir -p "$OUTDIR"
for d in "${DELAYS[@]}"; do
  "$B/felix-broker" --set quic_bind=127.0.0.1:$PORT --set metrics_bind=127.0.0.1:$ADMIN \
    --set state_dir="$OUTDIR/state" --set log_level=warn \
    --set subscriber_queue_policy=block --set subscriber_lane_queue_policy=block \
    --set pub_ingress_wait=true --set event_batch_max_delay_us="$d" >"$OUTDIR/broker$d.log" 2>&1 &
  BP=$!
  sleep 1
  FP=$(grep -o 'SHA-256 [0-9a-f]*' "$OUTDIR/broker$d.log" | awk '{print $2}')
  [ -n "$FP" ] || { echo "compare-delay: broker did not start:" >&2; cat "$OUTDIR/broker$d.log" >&2; exit 1; }
  for cell in "latency 1" "latency 10" "throughput 10" "throughput 1"; do
    set -- $cell
    "$B/felix-bench" --server 127.0.0.1:$PORT --pin "$FP" --admin 127.0.0.1:$ADMIN --broker-pid $BP \
      --mode "$1" --payload 1024 --fanout "$2" --runs 3 --json --quiet \
      --label "delay$d/$1/f$2" >>"$OUTDIR/results.jsonl" 2>>"$OUTDIR/bench.log"
  done
  kill -INT $BP; wait $BP || true
done
echo "compare-delay: results in $OUTDIR/results.jsonl"
