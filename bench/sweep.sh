#!/usr/bin/env bash
# sweep.sh - broker configurations against each other, interleaved, in one script.
#
# Each round restarts felix-broker (Release, 127.0.0.1, the lossless profile of lib.sh) once
# per configuration and runs the same cells against it, so slow phases of a shared host hit
# every configuration alike. Prints a table of medians per cell and configuration, and keeps
# every run as one JSON line (felix-bench --json) in OUTDIR/results.jsonl.
# This is how the placement and datagram defaults in docs/performance.md were chosen.
#
# usage: bench/sweep.sh [--rounds N] [--cells LIST] NAME=KEY=VALUE[,KEY=VALUE...] ...
#   NAME=...     a configuration: its name and the broker keys it sets (--set KEY=VALUE);
#                NAME= alone runs the shipped defaults
#   --rounds N   rounds (default 3: medians of 3 runs per cell)
#   --cells L    comma-separated cells, MODE:FANOUT[:STREAMS] (default
#                throughput:1,throughput:10,latency:1,latency:10); payload 1 KiB
# example:
#   bench/sweep.sh base= w1=workers=1 shards2=core_shards=2 \
#     dgram1452=loopback_mtu=1452
# env: BUILD (default <repo>/build/bench), OUTDIR (default /tmp/felix-sweep), FX_PORT,
#      FX_ADMIN, QUIET_MAX_S (default 10), BENCH_ARGS (extra felix-bench arguments;
#      felix-bench publishes one message per call by default: BENCH_ARGS="--batch 64"
#      measures the batch path the earlier sweeps in docs/performance.md used).
# A configuration that sets loopback_mtu also runs felix-bench with FELIX_LOOPBACK_MTU set
# to the same value, so the clients use the broker's datagram size.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
OUTDIR=${OUTDIR:-/tmp/felix-sweep}
FX_PORT=${FX_PORT:-15761}
FX_ADMIN=${FX_ADMIN:-18761}
FX_TAG=sweep
ROUNDS=3 CELLS="throughput:1,throughput:10,latency:1,latency:10"
usage() { sed -n '10,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
CFGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --cells) CELLS=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *=*) CFGS+=("$1"); shift ;;
    *) echo "sweep: unknown argument $1" >&2; usage ;;
  esac
done
[ ${#CFGS[@]} -gt 0 ] || { echo "sweep: give at least one NAME=... configuration" >&2; usage; }
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "sweep: --rounds must be a positive integer" >&2; exit 2; }
command -v python3 >/dev/null || { echo "sweep: needs python3" >&2; exit 1; }

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
fx_traps
mkdir -p "$OUTDIR/logs"
RESULTS=$OUTDIR/results.jsonl
: >"$RESULTS"
IFS=',' read -r -a CELL_ARR <<<"$CELLS"

for round in $(seq 1 "$ROUNDS"); do
  for cfg in "${CFGS[@]}"; do
    name=${cfg%%=*} keys=${cfg#*=}
    sets=() lmtu=${FELIX_LOOPBACK_MTU:-}
    if [ -n "$keys" ]; then
      IFS=',' read -r -a kv <<<"$keys"
      for k in "${kv[@]}"; do
        sets+=(--set "$k")
        case $k in loopback_mtu=*) lmtu=${k#*=} ;; esac
      done
    fi
    echo "sweep: round $round/$ROUNDS, $name ${sets[*]}" >&2
    fx_start_broker "$OUTDIR/logs/$name.broker.log" "$OUTDIR/state" "${sets[@]}"
    for cell in "${CELL_ARR[@]}"; do
      IFS=':' read -r mode fan streams <<<"$cell"
      fx_wait_quiet
      # shellcheck disable=SC2086
      FELIX_LOOPBACK_MTU=$lmtu fx_bench --mode "$mode" --payload 1024 --fanout "$fan" \
        --streams "${streams:-1}" --label "$name|$cell" ${BENCH_ARGS:-} \
        >>"$RESULTS" 2>>"$OUTDIR/logs/$name.bench.log" ||
        echo "sweep: $name $cell: felix-bench failed (see $OUTDIR/logs/$name.bench.log)" >&2
    done
    fx_stop_broker
  done
done

python3 - "$RESULTS" "${CFGS[@]}" <<'PY'
import json, sys, statistics
path, cfgs = sys.argv[1], [c.split('=', 1)[0] for c in sys.argv[2:]]
runs = {}
for line in open(path):
    d = json.loads(line)
    runs.setdefault(d['label'], []).append(d)
cells = []
for label in runs:
    cell = label.split('|', 1)[1]
    if cell not in cells:
        cells.append(cell)
def med(v):
    return statistics.median(v) if v else None
print('| cell | ' + ' | '.join(cfgs) + ' |')
print('|---|' + '---:|' * len(cfgs))
for cell in cells:
    row = []
    for c in cfgs:
        v = [d for d in runs.get(c + '|' + cell, []) if d.get('valid')]
        if not v:
            row.append('invalid')
        elif cell.startswith('latency'):
            row.append('%.0f / %.0f µs' % (med([d['p50_us'] for d in v]), med([d['p99_us'] for d in v])))
        else:
            row.append('{:,.0f}/s'.format(med([d['msgs_per_s'] for d in v])))
    print('| %s | %s |' % (cell, ' | '.join(row)))
print('\n(medians of valid runs; throughput = deliveries/s, latency = p50 / p99; every run in %s)' % path)
PY
