#!/usr/bin/env bash
# matrix.sh - the benchmark matrix of issue 6: payload x fanout x mode, Felix-C beside the peers.
#
# For every cell (mode, fanout, payload) it starts a fresh felix-broker (Release build) on
# 127.0.0.1 with the lossless profile of bench/compare-peers.sh, runs felix-bench against it
# RUNS times, and stops it; then ../shared/peers/run-peers.sh runs each peer on the same cells.
# Every run is one JSON line in OUT/results.jsonl (felix-bench --json / peerbench field names).
# At the end bench/render_charts.py draws OUT/throughput.svg, OUT/latency_p50.svg,
# OUT/latency_p99.svg and OUT/summary.md from that file (re-render any time with
# `bench/render_charts.py --out DIR DIR/results.jsonl`).
#
# usage: bench/matrix.sh --out DIR [--runs N] [--peers nats-tls,redis] [--quick]
#                        [--payloads "16 256 1024 4096"] [--fanouts "1 10"]
#                        [--modes "throughput latency"]
#   --out DIR    output folder (created; results.jsonl is appended to, so a rerun adds runs)
#   --runs N     runs per cell (default 3; charts show the median, whiskers the range)
#   --peers L    comma-separated run-peers.sh backends (default nats-tls; "" for none)
#   --quick      1 run per cell, payloads 256 1024, 5,000 latency round trips
#                (explicit --runs/--payloads given after --quick still win)
# Throughput runs last the run-length guard's floor (5 s measured, and at least 10x what the
# configuration can buffer); the peers get the same 5 s floor (TPUT_MIN_S=5).
# Latency: unacked, blocking next, one message in flight, 20,000 round trips (quick: 5,000).
# Overload has no peer counterpart and is not in the matrix (felix-bench --mode overload).
# env: BUILD (default <repo>/build/bench; configured Release and built if the binaries are
#      missing), PEERS (default <repo>/../shared/peers), FX_PORT, FX_ADMIN, QUIET_MAX_S
#      (default 10: wait at most that long for a quiet host before each cell).
# Only the PIDs this script starts are signalled.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
PEERS=${PEERS:-$ROOT/../shared/peers}
FX_PORT=${FX_PORT:-15731}
FX_ADMIN=${FX_ADMIN:-18731}
export QUIET_MAX_S=${QUIET_MAX_S:-10}

OUT="" RUNS=3 PEER_LIST=nats-tls PAYLOADS="16 256 1024 4096" FANOUTS="1 10"
MODES="throughput latency" LAT_N=20000 TPUT_MIN_S=5
usage() { sed -n '12,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    --runs) RUNS=${2:?}; shift 2 ;;
    --peers) PEER_LIST=${2?}; shift 2 ;;
    --payloads) PAYLOADS=${2:?}; shift 2 ;;
    --fanouts) FANOUTS=${2:?}; shift 2 ;;
    --modes) MODES=${2:?}; shift 2 ;;
    --quick) RUNS=1 PAYLOADS="256 1024" LAT_N=5000; shift ;;
    -h|--help) usage ;;
    *) echo "matrix: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$OUT" ] || { echo "matrix: --out DIR is required" >&2; usage; }
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "matrix: --runs must be a positive integer" >&2; exit 2; }
for m in $MODES; do
  case $m in throughput|latency) ;; *) echo "matrix: mode $m is not in the matrix" >&2; exit 2 ;; esac
done
command -v python3 >/dev/null || { echo "matrix: needs python3 (standard library only)" >&2; exit 1; }
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.jsonl

if [ ! -x "$BUILD/felix-bench" ] || [ ! -x "$BUILD/felix-broker" ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" --target felix-bench felix-broker -j2 >/dev/null
fi

# ---- the broker ----------------------------------------------------------------------

BROKER_PID="" FP=""
stop_broker() {
  [ -n "$BROKER_PID" ] || return 0
  kill -TERM "$BROKER_PID" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$BROKER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$BROKER_PID" 2>/dev/null || true
  wait "$BROKER_PID" 2>/dev/null || true
  BROKER_PID=""
}
trap stop_broker EXIT INT TERM

start_broker() {  # LOG: felix-broker with the lossless profile; sets BROKER_PID and FP
  local log=$1
  rm -rf "$OUT/state"
  "$BUILD/felix-broker" --set quic_bind="127.0.0.1:$FX_PORT" --set metrics_bind="127.0.0.1:$FX_ADMIN" \
    --set state_dir="$OUT/state" --set log_level=warn \
    --set subscriber_queue_policy=block --set subscriber_lane_queue_policy=block \
    --set pub_ingress_wait=true >"$log" 2>&1 &
  BROKER_PID=$!
  for _ in $(seq 1 100); do
    FP=$(sed -n 's/.*certificate SHA-256 \([0-9a-f]\{64\}\).*/\1/p' "$log")
    [ -n "$FP" ] && return 0
    kill -0 "$BROKER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "matrix: felix-broker did not start; log ($log):" >&2; cat "$log" >&2; exit 1
}

# The machine may be shared: wait (at most QUIET_MAX_S) for a nearly idle host, as
# run-peers.sh does before each peer run. other_cpu_s in every JSON line says what remained.
busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
wait_quiet() {
  local max=$QUIET_MAX_S pct=${QUIET_PCT:-15} t0=$SECONDS a b c d load
  [ "$max" -gt 0 ] || return 0
  while :; do
    read -r a b < <(busy_ticks); sleep 1; read -r c d < <(busy_ticks)
    load=$(( 100 * (c - a) * $(nproc) / ( (d - b) > 0 ? (d - b) : 1 ) ))
    [ "$load" -lt "$pct" ] && return 0
    if [ $((SECONDS - t0)) -ge "$max" ]; then
      echo "matrix: host not quiet (${load}% of a core busy); running anyway" >&2; return 0
    fi
  done
}

# ---- cells ---------------------------------------------------------------------------

IFS=', ' read -r -a PEER_ARR <<<"$PEER_LIST"
n_cells=0
for _ in $MODES; do for _ in $FANOUTS; do for _ in $PAYLOADS; do n_cells=$((n_cells + 1)); done; done; done
TOTAL=$(( n_cells * (1 + ${#PEER_ARR[@]}) ))
DONE=0 FAILED=0
progress() { DONE=$((DONE + 1)); echo "matrix: [$DONE/$TOTAL] $*" >&2; }

felix_cell() {  # MODE FANOUT PAYLOAD
  local mode=$1 f=$2 p=$3 cell="felix-c_$1_p$3_f$2" rc=0
  progress "$cell ($RUNS run(s))"
  start_broker "$OUT/logs/$cell.broker.log"
  wait_quiet
  local args=(--server "127.0.0.1:$FX_PORT" --pin "$FP" --admin "127.0.0.1:$FX_ADMIN"
              --broker-pid "$BROKER_PID" --mode "$mode" --payload "$p" --fanout "$f"
              --runs "$RUNS" --json --quiet --label "$cell")
  if [ "$mode" = latency ]; then args+=(--total "$LAT_N"); else args+=(--min-seconds "$TPUT_MIN_S"); fi
  "$BUILD/felix-bench" "${args[@]}" >>"$RESULTS" 2>>"$OUT/logs/$cell.bench.log" || rc=$?
  stop_broker
  # 3 = some run invalid (its JSON line says why); anything else is a setup failure.
  if [ "$rc" -ne 0 ]; then
    FAILED=$((FAILED + 1))
    echo "matrix: $cell: felix-bench exit $rc (see $OUT/logs/$cell.bench.log)" >&2
  fi
}

peer_cell() {  # PEER MODE FANOUT PAYLOAD
  local peer=$1 mode=$2 f=$3 p=$4 cell="$1_$2_p$4_f$3" rc=0
  progress "$cell ($RUNS run(s))"
  OUTDIR="$OUT/peers" LAT_N=$LAT_N TPUT_MIN_S=$TPUT_MIN_S \
    "$PEERS/run-peers.sh" "$peer" "$mode" "$p" "$f" "$RUNS" >>"$RESULTS" \
    2>"$OUT/logs/$cell.log" || rc=$?
  if [ "$rc" -ne 0 ]; then
    FAILED=$((FAILED + 1))
    echo "matrix: $cell: run-peers.sh exit $rc (see $OUT/logs/$cell.log)" >&2
  fi
}

echo "matrix: $TOTAL cells (modes: $MODES; fanouts: $FANOUTS; payloads: $PAYLOADS;" \
     "Felix-C${PEER_LIST:+, $PEER_LIST}), $RUNS run(s) each, results in $RESULTS" >&2
for mode in $MODES; do
  for f in $FANOUTS; do
    for p in $PAYLOADS; do
      felix_cell "$mode" "$f" "$p"
      for peer in "${PEER_ARR[@]}"; do peer_cell "$peer" "$mode" "$f" "$p"; done
    done
  done
done

rm -rf "$OUT/state"
NOTE="$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $RUNS run(s)/cell; median bar, min-max whisker; shared host"
python3 "$ROOT/bench/render_charts.py" --out "$OUT" --note "$NOTE" "$RESULTS"
if [ "$FAILED" -gt 0 ]; then
  echo "matrix: $FAILED cell(s) had failed or invalid runs (n/a in the charts; logs in $OUT/logs)" >&2
  exit 3
fi
echo "matrix: done; charts and summary.md in $OUT" >&2
