#!/usr/bin/env bash
# memory.sh - the broker's memory bars, each on a fresh felix-broker (Release, shipped defaults).
#
#   idle        VmRSS 1 s after start, nothing connected
#   idle-subs   felix-bench --mode idle-subs --subs N: bytes per idle subscription
#   overload    felix-bench --mode overload --fanout 3 --rss-watch S (the shedding profile,
#               one stalled subscriber): RSS every second from 10 s in, for S seconds
# Every run is one JSON line in OUTDIR/results.jsonl; a table of the runs is printed.
#
# usage: bench/memory.sh [--runs N] [--subs N] [--watch S]   (defaults 3, 10000, 60)
# env: BUILD (default <repo>/build/bench), OUTDIR (default /tmp/felix-memory), FX_PORT, FX_ADMIN,
#      BROKER_ARGS (extra felix-broker arguments, e.g. "--set allocator_retain_bytes=0").
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
OUTDIR=${OUTDIR:-/tmp/felix-memory}
FX_PORT=${FX_PORT:-15771}
FX_ADMIN=${FX_ADMIN:-18771}
FX_TAG=memory
FX_LOSSLESS=0
RUNS=3 SUBS=10000 WATCH=60
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=${2:?}; shift 2 ;;
    --subs) SUBS=${2:?}; shift 2 ;;
    --watch) WATCH=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) echo "memory: unknown argument $1" >&2; exit 2 ;;
  esac
done
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
fx_traps
mkdir -p "$OUTDIR/logs"
RESULTS=$OUTDIR/results.jsonl
: >"$RESULTS"

bench() {  # LABEL felix-bench args...
  local label=$1; shift
  # shellcheck disable=SC2086
  fx_bench --label "$label" "$@" >>"$RESULTS" 2>>"$OUTDIR/logs/bench.log" ||
    echo "memory: $label: felix-bench failed (see $OUTDIR/logs/bench.log)" >&2
}

for run in $(seq 1 "$RUNS"); do
  echo "memory: run $run/$RUNS: idle and idle-subs" >&2
  # shellcheck disable=SC2086
  fx_start_broker "$OUTDIR/logs/broker.log" "$OUTDIR/state" ${BROKER_ARGS:-}
  sleep 1
  rss=$(awk '/^VmRSS/{print $2}' "/proc/$BROKER_PID/status")
  echo "{\"label\":\"idle\",\"run\":$run,\"rss_idle_kb\":$rss,\"valid\":true}" >>"$RESULTS"
  bench idle-subs --mode idle-subs --subs "$SUBS"
  fx_stop_broker
  echo "memory: run $run/$RUNS: overload, RSS watched for $WATCH s" >&2
  # shellcheck disable=SC2086
  fx_start_broker "$OUTDIR/logs/broker.log" "$OUTDIR/state" ${BROKER_ARGS:-}
  bench overload --mode overload --fanout 3 --batch 64 --rss-watch "$WATCH"
  fx_stop_broker
done

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def get(label):
    return [r for r in rows if r.get('label') == label]
print('| run | idle RSS kB | idle-subs bytes/sub | overload healthy msg/s | RSS min-max kB | spread | peak kB |')
print('|---|---:|---:|---:|---:|---:|---:|')
for i, (a, b, c) in enumerate(zip(get('idle'), get('idle-subs'), get('overload')), 1):
    print('| %d | %s | %s | %s | %s-%s | %s%% | %s |' % (
        i, a['rss_idle_kb'], b.get('bytes_per_sub'), '{:,.0f}'.format(c.get('msgs_per_s', 0)),
        c.get('rss_watch_min_kb'), c.get('rss_watch_max_kb'), c.get('rss_watch_spread_pct'),
        c.get('peak_rss_kb')))
PY
