#!/usr/bin/env bash
# idem.sh - what idempotent publish costs (docs/semantics.md, "Idempotent publish"), in one run.
#
# Cells, 1 KiB payloads, one message per publish call, a fresh broker per run, rounds interleaved
# (each round runs every cell once) so slow drift of a shared host falls on all of them alike:
#   acked-w64        in memory: one publisher, 64 acked publishes in flight (fx_publish_async),
#                    a plain client and an idempotent one (--idempotent): acked msg/s and the
#                    ack latency (call to answer) p50/p99
#   commit-w64       the in-memory cell on a broker with ack_on_commit: a plain acked publish is
#                    then answered after its append on the worker, as an idempotent one always
#                    is (without it a plain one is answered once admitted, before the worker)
#   durable-w64      the same on a durable on_commit stream
#   unacked          in memory: throughput fanout 1 of a plain client, unacked; with OLD set,
#                    the same cell on the build OLD too (a build from before idempotent publish:
#                    the plain client's path must not have moved)
#   open             durable open time: STREAMS streams filled with RECORDS records each, once by
#                    a plain `felix pub` and once by `felix pub --idempotent` (every batch carries
#                    a producer mark; the segments roll every SEGMENT_BYTES, so the producers'
#                    snapshot is written and used); then ROUNDS warm restarts of each root in
#                    turn: start -> every stream "durable_state": "open" in GET /v1/streams
#
# usage: bench/idem.sh [--help]
# example:  OLD=/tmp/old/build/bench bench/idem.sh
#   where /tmp/old is a worktree of a commit before idempotent publish, built like BUILD:
#   git worktree add /tmp/old ff0ba0c && cmake -S /tmp/old -B /tmp/old/build/bench \
#     -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/old/build/bench --target felix-broker felix-bench
# env:
#   RUNS             rounds of the publish cells (default 3; medians shown)
#   SECONDS_PER_RUN  measured seconds of each publish run (default 10)
#   OLD              build directory of the older build for the unacked cell (default: none)
#   STREAMS, RECORDS, SEGMENT_BYTES, ROUNDS   the open cell (default 20, 20000, 4M, 5)
#   DIR              durable storage on a real disk (default <repo>/build/idem-bench)
#   BUILD            build directory (default <repo>/build/bench; built if missing, not rebuilt)
#   OUTDIR           JSONL, logs and the table (default /tmp/felix-idem/<timestamp>)
#   FX_PORT, FX_ADMIN  the broker's ports on 127.0.0.1 (default 15720, 18720)
# needs: curl, jq. Only the PIDs this script starts are signalled.
set -euo pipefail

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
NEW=$BUILD
RUNS=${RUNS:-3}
S=${SECONDS_PER_RUN:-10}
OLD=${OLD:-}
STREAMS=${STREAMS:-20}
RECORDS=${RECORDS:-20000}
SEGMENT_BYTES=${SEGMENT_BYTES:-4M}
ROUNDS=${ROUNDS:-5}
DIR=${DIR:-$ROOT/build/idem-bench}
OUTDIR=${OUTDIR:-/tmp/felix-idem/$(date -u +%Y%m%dT%H%M%SZ)}
FX_PORT=${FX_PORT:-15720}
FX_ADMIN=${FX_ADMIN:-18720}
FX_TAG=idem.sh
for t in curl jq; do
  command -v "$t" >/dev/null || { echo "$FX_TAG: needs $t" >&2; exit 1; }
done
if [ -n "$OLD" ]; then
  OLD=$(cd "$OLD" && pwd)
  for b in felix-broker felix-bench; do
    [ -x "$OLD/$b" ] || { echo "$FX_TAG: $OLD/$b is missing (build it Release first)" >&2; exit 1; }
  done
fi
mkdir -p "$DIR" "$OUTDIR"
case $(stat -f -c %T "$DIR") in
  tmpfs|ramfs) echo "$FX_TAG: $DIR is on $(stat -f -c %T "$DIR"): use a directory on a disk" >&2
               exit 1 ;;
esac
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
[ -x "$BUILD/felix" ] || cmake --build "$BUILD" --target felix -j2 >/dev/null
STORE=$DIR/store
cleanup() { fx_stop_broker; rm -rf "$STORE" "$DIR/open-plain" "$DIR/open-idem"; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM
J=$OUTDIR/idem.jsonl
log() { echo "# $(date -u +%T) $*" >&2; }

# run BUILDDIR POLICY LABEL felix-bench-args...: one run on a fresh broker.
run() {
  local build=$1 policy=$2 label=$3 sets=(); shift 3
  BUILD=$build
  rm -rf "$STORE"
  if [ "$policy" = memory-commit ]; then
    sets=(--set ack_on_commit=true)
  elif [ "$policy" != memory ]; then
    (umask 077 && mkdir -p "$STORE")
    sets=(--set durable_storage_dir="$STORE" --set durable_default=true --set durable_fsync_mode="$policy")
  fi
  fx_wait_quiet
  log "$label"
  fx_start_broker "$OUTDIR/broker.log" "$OUTDIR/state" "${sets[@]}"
  fx_bench --payload 1024 --batch 1 --label "$label" "$@" >>"$J" 2>>"$OUTDIR/felix-bench.log" ||
    echo "$FX_TAG: $label failed or was invalid (see $OUTDIR/felix-bench.log)" >&2
  fx_stop_broker
  BUILD=$NEW
}

W64=(--mode throughput --ack --publishers 1 --window 64 --min-seconds "$S")
for r in $(seq 1 "$RUNS"); do
  log "round $r of $RUNS"
  run "$NEW" memory acked-w64-plain "${W64[@]}"
  run "$NEW" memory acked-w64-idem "${W64[@]}" --idempotent
  run "$NEW" memory-commit commit-w64-plain "${W64[@]}"
  run "$NEW" memory-commit commit-w64-idem "${W64[@]}" --idempotent
  run "$NEW" on_commit durable-w64-plain "${W64[@]}"
  run "$NEW" on_commit durable-w64-idem "${W64[@]}" --idempotent
  run "$NEW" memory unacked-new --mode throughput --fanout 1 --min-seconds "$S"
  [ -z "$OLD" ] || run "$OLD" memory unacked-old --mode throughput --fanout 1 --min-seconds "$S"
done

# ---- open: two roots, plain and marked, restarted in turn -------------------------------------
bytes_of() { numfmt --from=iec "${1%B}"; }
now_ns() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }
start_on() {  # ROOT LOGNAME
  fx_start_broker "$OUTDIR/broker-$2.log" "$OUTDIR/state-open" --set durable_storage_dir="$1" \
    --set durable_default=true --set durable_fsync_mode=none --set log_level=info \
    --set durable_segment_bytes="$(bytes_of "$SEGMENT_BYTES")" \
    --set tenant_durable_streams_max="$STREAMS"
}
fill() {  # ROOT EXTRA-FLAGS...
  local root=$1; shift
  rm -rf "$root"; (umask 077 && mkdir -p "$root")
  start_on "$root" "fill-$(basename "$root")"
  for i in $(seq 1 "$STREAMS"); do
    "$BUILD/felix" pub --server "127.0.0.1:$FX_PORT" --pin "$FP" --ack per_batch --size 1K \
      --count "$RECORDS" "$@" "t1/default/s$i" >>"$OUTDIR/fill.log" 2>&1 ||
      { echo "$FX_TAG: filling t1/default/s$i failed ($OUTDIR/fill.log)" >&2; exit 1; }
  done
  fx_stop_broker
}
open_once() {  # ROOT LABEL
  local t0 open
  t0=$(now_ns)
  start_on "$1" "open-$2"
  while :; do
    open=$(curl -fs "http://127.0.0.1:$FX_ADMIN/v1/streams" 2>/dev/null |
      jq '[.streams[] | select(.durable_state == "open")] | length' 2>/dev/null || echo 0)
    [ "${open:-0}" -ge "$STREAMS" ] && break
    kill -0 "$BROKER_PID" 2>/dev/null || { echo "$FX_TAG: the broker exited" >&2; exit 1; }
    sleep 0.01
  done
  secs "$t0" "$(now_ns)"
  fx_stop_broker
}
log "open: filling $STREAMS streams x $RECORDS records, plain and idempotent"
fill "$DIR/open-plain"
fill "$DIR/open-idem" --idempotent
FIRST=$(find "$DIR/open-idem" -maxdepth 1 -type d -name 't1_*' | sort | head -1)
MARKS=$("$BUILD/felix" log inspect --limit 5 "$FIRST" 2>&1 | tee "$OUTDIR/inspect-idem.txt" |
  grep -c -i 'producer' || true)
OPEN_PLAIN=() OPEN_IDEM=()
for r in $(seq 1 "$ROUNDS"); do
  OPEN_PLAIN+=("$(open_once "$DIR/open-plain" plain)")
  OPEN_IDEM+=("$(open_once "$DIR/open-idem" idem)")
  log "open round $r: plain ${OPEN_PLAIN[-1]} s, idempotent ${OPEN_IDEM[-1]} s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

med() {  # LABEL FIELD
  jq -rs --arg l "$1" --arg f "$2" '
    [ .[] | select(.label == $l and .valid == true) | .[$f] | select(. != null) ] | sort
    | if length == 0 then "-" else .[(length - 1) / 2 | floor] end' "$J"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || a == 0) print "-"; else printf "%.2f", b / a }'; }
row() {  # LABEL-A LABEL-B FIELD TEXT
  local a b; a=$(med "$1" "$3"); b=$(med "$2" "$3")
  echo "| $4 | $a | $b | $(ratio "$a" "$b") |"
}
PO=$(median "${OPEN_PLAIN[@]}") IO=$(median "${OPEN_IDEM[@]}")
{
  echo "idempotent publish, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(git -C "$ROOT" rev-parse --short HEAD);" \
       "medians of $RUNS interleaved rounds (open: $ROUNDS), 1 KiB, one message per call"
  echo
  echo "| cell | A | B | B / A |"
  echo "|---|---:|---:|---:|"
  row acked-w64-plain acked-w64-idem msgs_per_s "in memory, acked, 64 in flight, msgs/s (A plain, B idempotent)"
  row acked-w64-plain acked-w64-idem p50_us "in memory, acked, 64 in flight, ack p50 us"
  row acked-w64-plain acked-w64-idem p99_us "in memory, acked, 64 in flight, ack p99 us"
  row commit-w64-plain commit-w64-idem msgs_per_s "in memory, ack_on_commit, acked, 64 in flight, msgs/s"
  row commit-w64-plain commit-w64-idem p50_us "in memory, ack_on_commit, acked, 64 in flight, ack p50 us"
  row durable-w64-plain durable-w64-idem msgs_per_s "durable on_commit, acked, 64 in flight, msgs/s"
  row durable-w64-plain durable-w64-idem p50_us "durable on_commit, acked, 64 in flight, ack p50 us"
  [ -z "$OLD" ] || row unacked-old unacked-new msgs_per_s "in memory, unacked, fanout 1, deliveries/s (A $OLD, B this build)"
  [ -n "$OLD" ] || echo "| in memory, unacked, fanout 1, deliveries/s (this build) | - | $(med unacked-new msgs_per_s) | - |"
  echo "| durable open of $STREAMS streams x $RECORDS records, s (A plain, B idempotent) | $PO | $IO | $(ratio "$PO" "$IO") |"
  echo
  echo "open restarts: plain ${OPEN_PLAIN[*]}; idempotent ${OPEN_IDEM[*]}; lines naming a producer in felix log inspect --limit 5 of $(basename "$FIRST") (idempotent root): $MARKS"
  echo "JSONL: $J"
} | tee "$OUTDIR/table.md"
