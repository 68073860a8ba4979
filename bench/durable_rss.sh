#!/usr/bin/env bash
# durable_rss.sh - the broker's resident memory after one large frame to each of many durable
# streams, then idle: what the durable logs' buffers keep once the traffic is gone.
#
# One fresh felix-broker (Release, shipped shedding defaults, durable_default=true, fsync
# periodic, storage under DIR, memory_limit_bytes LIMIT). Then, in turn:
#   idle       VmRSS once the broker has been idle IDLE_S seconds (the idle trim has run)
#   peak       VmRSS right after `felix pub --size SIZE --ack per_message` sent one message to
#              each of STREAMS durable streams (one frame each; every stream's log appended it)
#   after      VmRSS once the broker has been idle IDLE_S seconds again
#   rings      felix_stream_retained_bytes: the last messages the streams' rings keep in memory
#              by design (tenant_retained_bytes, 256 MiB by default), not a durable buffer
# and prints them with peak against the limit and (after - rings) against idle. One JSON line goes to
# OUTDIR/results.jsonl.
#
# usage: bench/durable_rss.sh            (example: STREAMS=20 SIZE=4M bench/durable_rss.sh)
# env:
#   STREAMS   durable streams, one message each (default 100)
#   SIZE      payload of that message (default 16000000: one frame under max_frame_bytes 16 MiB)
#   LIMIT     memory_limit_bytes given to the broker (default 1GiB)
#   IDLE_S    seconds of idleness before each idle reading (default 6; the idle trim runs
#             after allocator_idle_trim_ms, 2 s)
#   DIR       storage root (default <repo>/build/durable-rss, created 0700, emptied first)
#   BUILD     build directory (default <repo>/build/bench); OUTDIR (default /tmp/felix-durable-rss)
#   FX_PORT, FX_ADMIN  the broker's ports on 127.0.0.1 (default 15710, 18710)
# Only the PID this script starts is signalled.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
STREAMS=${STREAMS:-100}
SIZE=${SIZE:-16000000}
LIMIT=${LIMIT:-1GiB}
IDLE_S=${IDLE_S:-6}
DIR=${DIR:-$ROOT/build/durable-rss}
OUTDIR=${OUTDIR:-/tmp/felix-durable-rss}
FX_PORT=${FX_PORT:-15710}
FX_ADMIN=${FX_ADMIN:-18710}
FX_TAG=durable_rss.sh
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

fx_build_if_missing
[ -x "$BUILD/felix" ] || cmake --build "$BUILD" --target felix -j2 >/dev/null
mkdir -p "$OUTDIR"
rm -rf "$DIR"
mkdir -p -m 0700 "$DIR"
fx_traps

rss_kb() { awk '/^VmRSS:/{print $2}' "/proc/$BROKER_PID/status"; }

FX_LOSSLESS=0 fx_start_broker "$OUTDIR/broker.log" "$OUTDIR/state" \
  --set durable_storage_dir="$DIR" --set durable_default=true \
  --set memory_limit_bytes="$LIMIT"
sleep "$IDLE_S"
idle=$(rss_kb)

# The client's publish byte budget (4 MiB by default) must hold one SIZE publish.
export FELIX_SERVER="127.0.0.1:$FX_PORT" FELIX_PIN="$FP" FELIX_PUBLISH_INFLIGHT_BYTES=$((64 << 20))
t0=$(date +%s.%N)
for i in $(seq 1 "$STREAMS"); do
  "$BUILD/felix" pub --ack per_message --size "$SIZE" "t1/default/rss$i" 2>>"$OUTDIR/pub.log" ||
    { echo "$FX_TAG: publish $i failed; see $OUTDIR/pub.log" >&2; exit 1; }
done
t1=$(date +%s.%N)
peak=$(rss_kb)
sleep "$IDLE_S"
after=$(rss_kb)
# What the streams' rings keep in memory by design (tenant_retained_bytes, 256 MiB by default):
# the last messages of each stream, for subscribers joining at the tail.
ring_b=$(curl -fs "http://127.0.0.1:$FX_ADMIN/metrics" |
  awk '$1 == "felix_stream_retained_bytes" { print $2 }')
ring_b=${ring_b:-0}
limit_b=$(numfmt --from=iec "${LIMIT%iB}" 2>/dev/null || numfmt --from=iec "${LIMIT%B}")

awk -v i="$idle" -v p="$peak" -v a="$after" -v l="$limit_b" -v s="$STREAMS" -v z="$SIZE" -v r="$ring_b" \
    -v t0="$t0" -v t1="$t1" 'BEGIN {
  printf "%d durable streams, one %d-byte message each (%.1f s)\n", s, z, t1 - t0
  printf "  idle   %8.1f MiB\n", i / 1024
  printf "  peak   %8.1f MiB   (memory_limit_bytes %.0f MiB: %s)\n", p / 1024, l / 1048576,
         p * 1024 <= l ? "within" : "ABOVE"
  printf "  after  %8.1f MiB   (after/idle %.2f)\n", a / 1024, a / i
  printf "  rings  %8.1f MiB   (felix_stream_retained_bytes: the messages the rings keep)\n",
         r / 1048576
  x = a - r / 1024
  printf "  after - rings %5.1f MiB   (/idle %.2f: %s)\n", x / 1024, x / i,
         x <= i * 1.10 ? "within 10% of idle" : "NOT within 10% of idle"
}'
printf '{"streams":%d,"size":%d,"idle_kb":%d,"peak_kb":%d,"after_kb":%d,"ring_bytes":%s,"limit_bytes":%s}\n' \
  "$STREAMS" "$SIZE" "$idle" "$peak" "$after" "$ring_b" "$limit_b" >>"$OUTDIR/results.jsonl"
