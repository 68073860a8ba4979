#!/usr/bin/env bash
# publish-paths.sh - Felix-C's publish paths side by side, one broker, one run of cells.
#
# Starts felix-broker (Release build) on 127.0.0.1 with the lossless profile of lib.sh and
# runs felix-bench against it, RUNS times per cell, 1 KiB payloads unless a cell says
# otherwise, then prints a table of medians and the ratios between cells:
#   tput/fF          throughput fanout F (1, 10), one message per fx_publish call (the
#                    peers' shape; natural batching merges what queues behind a send)
#   tput-b64/fF      the same with 64 messages per fx_publish_batch call (--batch 64)
#   tput-frame/f1    one message per call with FELIX_PUBLISH_COALESCE=0: one frame per
#                    message, the broker's per-frame path alone
#   tput16/f1        16-byte payloads, one message per call
#   acked/p16        16 publisher threads sharing one client, one acked fx_publish in flight
#                    each: acked msg/s, and that against 16 / (ack round trip p50)
#   async/w256       one publisher, fx_publish_async with 256 acked publishes in flight:
#                    acked msg/s, and that against unacked one per call (tput/f1)
#   lat/f1           latency fanout 1, one in flight, back to back
#   lat1000/f1       latency fanout 1 at a fixed 1,000 round trips a second
# The NATS TLS ratios of the same shapes are bench/compare-peers.sh's (1 KiB) and
# bench/matrix.sh's (16 B: --payloads 16 --fanouts 1 --modes throughput).
#
# usage: bench/publish-paths.sh
# env: RUNS (default 3), BUILD (default <repo>/build/bench), OUTDIR (default
#      /tmp/felix-publish-paths/<timestamp>), FX_PORT, FX_ADMIN, QUIET_MAX_S (default 10),
#      LAT_N (latency round trips, default 20000; lat1000 takes LAT_N / 1000 seconds).
# Only the PIDs this script starts are signalled.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
RUNS=${RUNS:-3}
LAT_N=${LAT_N:-20000}
TS=$(date +%Y%m%dT%H%M%S)
OUTDIR=${OUTDIR:-/tmp/felix-publish-paths/$TS}
FX_PORT=${FX_PORT:-15100}
FX_ADMIN=${FX_ADMIN:-18100}
mkdir -p "$OUTDIR"
command -v jq >/dev/null || { echo "publish-paths: needs jq" >&2; exit 1; }
RESULTS=$OUTDIR/results.jsonl

FX_TAG=publish-paths
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
fx_traps

cell() {  # LABEL [felix-bench args]...
  local label=$1; shift
  fx_wait_quiet
  echo "# $label" >&2
  fx_bench --runs "$RUNS" --label "$label" "$@" >>"$RESULTS" 2>>"$OUTDIR/felix-bench.log" ||
    echo "# $label: some run failed or was invalid (see $OUTDIR/felix-bench.log)" >&2
}

fx_start_broker "$OUTDIR/broker.log" "$OUTDIR/state"
for f in 1 10; do
  cell "tput/f$f" --mode throughput --payload 1024 --fanout "$f" --batch 1
  cell "tput-b64/f$f" --mode throughput --payload 1024 --fanout "$f" --batch 64
done
FELIX_PUBLISH_COALESCE=0 cell "tput-frame/f1" --mode throughput --payload 1024 --fanout 1 --batch 1
cell "tput16/f1" --mode throughput --payload 16 --fanout 1 --batch 1
cell "acked/p16" --mode throughput --ack --payload 1024 --publishers 16
cell "async/w256" --mode throughput --ack --payload 1024 --window 256
cell "lat/f1" --mode latency --payload 1024 --fanout 1 --total "$LAT_N"
cell "lat1000/f1" --mode latency --payload 1024 --fanout 1 --total "$LAT_N" --rate 1000
fx_stop_broker

med() {  # LABEL FIELD -> median over valid runs, or "-"
  jq -rs --arg l "$1" --arg f "$2" '
    [ .[] | select(.label == $l and .valid == true) | .[$f] | select(. != null) ] | sort
    | if length == 0 then "-" else .[(length - 1) / 2 | floor] end' "$RESULTS"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }

{
  echo "Felix-C publish paths, medians of $RUNS runs, lossless profile ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs)"
  echo
  echo "| cell | msg/s | p50 us | p99 us | ratio |"
  echo "|---|---:|---:|---:|---|"
  for f in 1 10; do
    a=$(med "tput/f$f" msgs_per_s) b=$(med "tput-b64/f$f" msgs_per_s)
    echo "| throughput fanout $f, one message per call | $a | | | |"
    echo "| throughput fanout $f, --batch 64 | $b | | | one per call / --batch 64 = $(ratio "$a" "$b") |"
  done
  a=$(med "tput-frame/f1" msgs_per_s)
  echo "| throughput fanout 1, one frame per message (FELIX_PUBLISH_COALESCE=0) | $a | | | vs one per call merged = $(ratio "$a" "$(med tput/f1 msgs_per_s)") |"
  echo "| throughput fanout 1, 16 B, one message per call | $(med tput16/f1 msgs_per_s) | | | |"
  a=$(med acked/p16 msgs_per_s) p=$(med acked/p16 p50_us)
  ideal=$(awk -v p="$p" 'BEGIN { if (p == "-" || p == 0) print "-"; else printf "%.0f", 16e6 / p }')
  echo "| 16 threads acked, one in flight each | $a | $p | $(med acked/p16 p99_us) | vs 16 / p50 ($ideal) = $(ratio "$a" "$ideal") |"
  a=$(med async/w256 msgs_per_s)
  echo "| async acked, window 256 | $a | $(med async/w256 p50_us) | $(med async/w256 p99_us) | vs unacked one per call = $(ratio "$a" "$(med tput/f1 msgs_per_s)") |"
  echo "| latency fanout 1, back to back | | $(med lat/f1 p50_us) | $(med lat/f1 p99_us) | |"
  echo "| latency fanout 1, 1,000 msg/s | | $(med lat1000/f1 p50_us) | $(med lat1000/f1 p99_us) | |"
  echo
  echo "JSONL: $RESULTS"
} | tee "$OUTDIR/table.md"
