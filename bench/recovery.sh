#!/usr/bin/env bash
# recovery.sh - how long a broker with many durable streams takes to serve again after a restart
# (docs/durability.md, "Start-up"), beside the disk's sequential read time of the logs.
#
# Builds nothing if the Release binaries are in BUILD (felix-broker, felix; else it builds them).
#  1. starts felix-broker with durable_default=true (fsync none) and storage under DIR/data,
#     creates STREAMS durable streams t1/default/s<i> and fills each with BYTES of RECORD-byte
#     messages (felix pub, PARALLEL at once), then stops it (SIGTERM: every log is flushed);
#  2. empties the page cache: as root sync; echo 3 > /proc/sys/vm/drop_caches; otherwise only
#     the segment files' pages are evicted (dd iflag=nocache count=0), which needs no root;
#  3. ROUNDS times: a cold sequential read of the segment files, then a cold restart of the
#     broker on the same root; then one more read. It reports the medians of
#       ready_s      start -> GET /ready answers 200 (the listeners are up; under systemd READY=1
#                    is sent at that point)
#       available_s  start -> GET /v1/streams shows every stream "durable_state": "open"
#                    (polled every POLL_MS); the broker's own line "recovered N of M durable
#                    streams in X s" is shown beside it
#       read_s       the page cache emptied, a sequential read (cat) of every segment file:
#                    what recovery would have to scan at most (the active segments are
#                    scanned whole, sealed ones only past their last index entry). Reads and
#                    restarts take turns because on a virtual disk both move a lot from one
#                    minute to the next (the first pass after a large fill is slow)
#     plus the bytes on disk and the rates.
#
# usage: bench/recovery.sh [--help]
# example (small, a check that it works):  STREAMS=50 BYTES=4M bench/recovery.sh
# example (the goal's size):               STREAMS=1000 BYTES=20M PARALLEL=8 bench/recovery.sh
# env:
#   STREAMS   durable streams (default 50)
#   BYTES     payload bytes per stream, K/M/G suffixes (default 4M)
#   RECORD    payload bytes per message, K/M suffixes (default 64K)
#   PARALLEL  streams filled at once (default 4)
#   ROUNDS    restarts measured, each after a cold sequential read (default 3; medians shown)
#   POLL_MS   GET /v1/streams poll period while waiting for availability (default 50)
#   SEGMENT_BYTES  durable_segment_bytes (default 256M, the broker's default: a stream's BYTES
#             below it all sit in its active segment, which recovery scans whole)
#   PREALLOCATE    durable_preallocate (default false: true reserves STREAMS x SEGMENT_BYTES
#             of disk)
#   DIR       work directory on the disk to measure (default <repo>/build/recovery-bench; a
#             tmpfs or ramfs is refused; the script removes only DIR/data and DIR/state)
#   BUILD     build directory (default <repo>/build/bench)
#   OUTDIR    logs and the result line (default /tmp/felix-recovery/<timestamp>)
#   FX_PORT, FX_ADMIN  the broker's ports on 127.0.0.1 (default 15710, 18710)
# needs: curl, jq
# Only the PIDs this script starts are signalled.
set -euo pipefail

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
STREAMS=${STREAMS:-50}
BYTES=${BYTES:-4M}
RECORD=${RECORD:-64K}
PARALLEL=${PARALLEL:-4}
ROUNDS=${ROUNDS:-3}
POLL_MS=${POLL_MS:-50}
SEGMENT_BYTES=${SEGMENT_BYTES:-256M}
PREALLOCATE=${PREALLOCATE:-false}
DIR=${DIR:-$ROOT/build/recovery-bench}
OUTDIR=${OUTDIR:-/tmp/felix-recovery/$(date -u +%Y%m%dT%H%M%SZ)}
FX_PORT=${FX_PORT:-15710}
FX_ADMIN=${FX_ADMIN:-18710}
FX_TAG=recovery.sh
export FX_LOSSLESS=0

for t in curl jq; do
  command -v "$t" >/dev/null || { echo "$FX_TAG: needs $t" >&2; exit 1; }
done
bytes_of() { numfmt --from=iec "${1%B}"; }
TOTAL=$(bytes_of "$BYTES")
REC=$(bytes_of "$RECORD")
COUNT=$(( (TOTAL + REC - 1) / REC ))
mkdir -p "$DIR" "$OUTDIR"
case $(stat -f -c %T "$DIR") in
  tmpfs|ramfs) echo "$FX_TAG: $DIR is on $(stat -f -c %T "$DIR"): use a directory on a disk" >&2
               exit 1 ;;
esac
DATA=$DIR/data
STATE=$DIR/state

if [ ! -x "$BUILD/felix-broker" ] || [ ! -x "$BUILD/felix" ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" --target felix-broker felix -j2 >/dev/null
fi
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
cleanup() { fx_stop_broker; rm -rf "$DATA" "$STATE"; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM
log() { echo "# $(date -u +%T) $*" >&2; }
now_ns() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }

start() {
  fx_start_broker "$OUTDIR/broker-$1.log" "$STATE" --set durable_storage_dir="$DATA" \
    --set durable_default=true --set durable_fsync_mode=none --set log_level=info \
    --set durable_segment_bytes="$(bytes_of "$SEGMENT_BYTES")" --set durable_preallocate="$PREALLOCATE" \
    --set max_streams_per_tenant="$((STREAMS > 1024 ? STREAMS : 1024))" \
    --set tenant_durable_streams_max="$STREAMS"
}

cold() {
  sync
  if [ "$(id -u)" = 0 ]; then
    echo 3 >/proc/sys/vm/drop_caches
  else
    find "$DATA" -name '*.log' -print0 | xargs -0 -r -I{} dd if={} iflag=nocache count=0 status=none
  fi
}

# ---- 1. fill -----------------------------------------------------------------------------
rm -rf "$DATA"
log "filling $STREAMS durable streams with $BYTES each ($COUNT messages of $RECORD)"
start fill
fill_one() {
  "$BUILD/felix" pub --server "127.0.0.1:$FX_PORT" --pin "$FP" --ack per_batch --batch 8 \
    --size "$RECORD" --count "$COUNT" "t1/default/s$1" >>"$OUTDIR/fill.log" 2>&1 ||
    { echo "$FX_TAG: filling t1/default/s$1 failed ($OUTDIR/fill.log)" >&2; return 1; }
}
export -f fill_one
export BUILD FX_PORT FP RECORD COUNT OUTDIR FX_TAG
seq 1 "$STREAMS" | xargs -P "$PARALLEL" -I{} bash -c 'fill_one {}'
fx_stop_broker
DISK_BYTES=$(find "$DATA" -name '*.log' -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }')
log "$(numfmt --to=iec "$DISK_BYTES") of segment files; emptying the page cache"

read_all() {
  cold
  local r0 r1
  r0=$(now_ns)
  find "$DATA" -name '*.log' -print0 | sort -z | xargs -0 cat >/dev/null
  r1=$(now_ns)
  secs "$r0" "$r1"
}

# ---- 2. ROUNDS x (cold sequential read, cold restart), then one more read -------------------
# The restart and the read take turns so that both meet the same disk: the figures on a
# virtual disk move a lot from one minute to the next (the first pass after a large fill, the
# host's own caches), and the table shows medians.
restart_once() {
  local t0 t_ready t_all open
  cold
  t0=$(now_ns)
  start "restart-$1"
  until curl -fs -o /dev/null "http://127.0.0.1:$FX_ADMIN/ready"; do sleep 0.01; done
  t_ready=$(now_ns)
  while :; do
    open=$(curl -fs "http://127.0.0.1:$FX_ADMIN/v1/streams" |
      jq '[.streams[] | select(.durable_state == "open")] | length')
    [ "$open" -ge "$STREAMS" ] && break
    kill -0 "$BROKER_PID" 2>/dev/null || { echo "$FX_TAG: the broker exited" >&2; exit 1; }
    sleep "$(awk -v m="$POLL_MS" 'BEGIN { print m / 1000 }')"
  done
  t_all=$(now_ns)
  fx_stop_broker
  READY_L+=("$(secs "$t0" "$t_ready")")
  ALL_L+=("$(secs "$t0" "$t_all")")
  LINE_L+=("$(grep -o 'recovered [0-9]* of [0-9]* durable streams in [0-9.]* s' \
    "$OUTDIR/broker-restart-$1.log" | tail -1 || true)")
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
READY_L=() ALL_L=() LINE_L=() READ_L=()
for r in $(seq 1 "$ROUNDS"); do
  READ_L+=("$(read_all)")
  log "round $r of $ROUNDS: sequential read ${READ_L[-1]} s; restarting"
  restart_once "$r"
  log "round $r: ready after ${READY_L[-1]} s, every stream open after ${ALL_L[-1]} s (${LINE_L[-1]})"
done
READ_L+=("$(read_all)")

READY_S=$(median "${READY_L[@]}")
ALL_S=$(median "${ALL_L[@]}")
READ_S=$(median "${READ_L[@]}")
MBS() { awk -v b="$DISK_BYTES" -v s="$1" 'BEGIN { printf "%.0f", (s > 0 ? b / s / 1e6 : 0) }'; }
printf '%s\n' \
  "streams=$STREAMS bytes_per_stream=$BYTES segment_bytes_on_disk=$DISK_BYTES cache=$([ "$(id -u)" = 0 ] && echo dropped || echo evicted-per-file)" \
  "medians of $ROUNDS restarts and $((ROUNDS + 1)) reads: ready_s=$READY_S available_s=$ALL_S ($(MBS "$ALL_S") MB/s) read_s=$READ_S ($(MBS "$READ_S") MB/s) available/read=$(awk -v a="$ALL_S" -v r="$READ_S" 'BEGIN { printf "%.2f", (r > 0 ? a / r : 0) }')" \
  "each restart: ready_s ${READY_L[*]}; available_s ${ALL_L[*]}; reads_s ${READ_L[*]}" \
  "broker, last restart: ${LINE_L[-1]:-no recovery line found}" | tee "$OUTDIR/result.txt"
