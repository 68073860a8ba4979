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
# Felix-C throughput is measured twice per cell, as two series side by side: one message per
# publish call (felix-bench's default --batch 1, the shape the peers' harness publishes in:
# label felix-c_...) and 64 messages per fx_publish_batch call (--batch 64: felix-c-b64_...),
# so no chart compares the batch path with the peers' per-message path.
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

FX_TAG=matrix
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
fx_traps

# ---- cells ---------------------------------------------------------------------------

IFS=', ' read -r -a PEER_ARR <<<"$PEER_LIST"
n_cells=0
for _ in $MODES; do for _ in $FANOUTS; do for _ in $PAYLOADS; do n_cells=$((n_cells + 1)); done; done; done
n_tput=0  # throughput cells run Felix-C twice (--batch 1 and --batch 64)
for m in $MODES; do
  [ "$m" = throughput ] || continue
  for _ in $FANOUTS; do for _ in $PAYLOADS; do n_tput=$((n_tput + 1)); done; done
done
TOTAL=$(( n_cells * (1 + ${#PEER_ARR[@]}) + n_tput ))
DONE=0 FAILED=0
progress() { DONE=$((DONE + 1)); echo "matrix: [$DONE/$TOTAL] $*" >&2; }

felix_cell() {  # MODE FANOUT PAYLOAD [BATCH]
  local mode=$1 f=$2 p=$3 batch=${4:-1} rc=0
  local cell="felix-c_$1_p$3_f$2"
  [ "$batch" = 1 ] || cell="felix-c-b${batch}_$1_p$3_f$2"
  progress "$cell ($RUNS run(s))"
  fx_start_broker "$OUT/logs/$cell.broker.log" "$OUT/state"
  fx_wait_quiet
  local args=(--mode "$mode" --payload "$p" --fanout "$f" --runs "$RUNS" --label "$cell")
  if [ "$mode" = latency ]; then args+=(--total "$LAT_N"); else args+=(--min-seconds "$TPUT_MIN_S" --batch "$batch"); fi
  fx_bench "${args[@]}" >>"$RESULTS" 2>>"$OUT/logs/$cell.bench.log" || rc=$?
  fx_stop_broker
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
      if [ "$mode" = throughput ]; then felix_cell "$mode" "$f" "$p" 64; fi
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
