#!/usr/bin/env bash
# ab.sh - two builds of Felix-C against each other on the one-message-per-call cells, in one run.
#
# For a change that must not move performance: build the old and the new commit (Release), then
#   bench/ab.sh OLD_BUILD NEW_BUILD
# e.g.  git worktree add /tmp/old <commit> && cmake -S /tmp/old -B /tmp/old/build/bench \
#         -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/old/build/bench --target felix-broker felix-bench
#       bench/ab.sh /tmp/old/build/bench build/bench
# Cells, 1 KiB payload, one message per publish call (the peers' shape), lossless profile
# (bench/lib.sh): in-memory throughput fanout 1 and 10 and latency fanout 1 and 10 (the
# bench/compare-peers.sh cells); durable (bench/durable.sh cells) throughput fanout 1 under
# periodic, acked on_commit with 64 in flight, and acked latency one in flight under on_commit.
# Rounds are interleaved (each round runs every cell on A then B, a fresh broker per run), so slow
# drift of a shared host falls on both builds alike. The table shows medians of valid runs and
# B / A (for latency, B / A above 1 means B is slower).
# env:
#   RUNS             rounds (default 3)
#   SECONDS_PER_RUN  measured seconds of each throughput run (default 10; at least 5)
#   DIR              durable storage directory on a real disk (default <repo>/build/ab-durable)
#   OUTDIR           JSONL and logs (default /tmp/felix-ab/<timestamp>)
#   FX_PORT, FX_ADMIN  broker ports on 127.0.0.1 (default 15800, 18800)
# Only the PIDs this script starts are signalled.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 2 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
A=$(cd "$1" && pwd) B=$(cd "$2" && pwd)
for d in "$A" "$B"; do
  for b in felix-broker felix-bench; do
    [ -x "$d/$b" ] || { echo "ab: $d/$b is missing (build it Release first)" >&2; exit 1; }
  done
done
command -v jq >/dev/null || { echo "ab: needs jq" >&2; exit 1; }
RUNS=${RUNS:-3}
S=${SECONDS_PER_RUN:-10}
[ "$S" -ge 5 ] || S=5
DIR=${DIR:-$ROOT/build/ab-durable}
OUTDIR=${OUTDIR:-/tmp/felix-ab/$(date +%Y%m%dT%H%M%S)}
FX_PORT=${FX_PORT:-15800}
FX_ADMIN=${FX_ADMIN:-18800}
FX_TAG=ab
mkdir -p "$OUTDIR"
(umask 077 && mkdir -p "$DIR")
STORE=$DIR/store
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
cleanup() { fx_stop_broker; rm -rf "$STORE"; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM
J=$OUTDIR/ab.jsonl

# run SIDE POLICY LABEL felix-bench-args...: one run of one build on a fresh broker.
run() {
  local side=$1 policy=$2 label=$3 sets=(); shift 3
  BUILD=$([ "$side" = A ] && echo "$A" || echo "$B")
  rm -rf "$STORE"
  if [ "$policy" != memory ]; then
    (umask 077 && mkdir -p "$STORE")
    sets=(--set durable_storage_dir="$STORE" --set durable_default=true --set durable_fsync_mode="$policy")
  fi
  fx_wait_quiet
  echo "# $(date -u +%T) $side $label" >&2
  fx_start_broker "$OUTDIR/broker.log" "$OUTDIR/state" "${sets[@]}"
  fx_bench --payload 1024 --batch 1 --label "$side/$label" "$@" >>"$J" 2>>"$OUTDIR/felix-bench.log" ||
    echo "ab: $side/$label failed or was invalid (see $OUTDIR/felix-bench.log)" >&2
  fx_stop_broker
}

cells() {  # SIDE
  run "$1" memory tput-f1 --mode throughput --fanout 1 --min-seconds "$S"
  run "$1" memory tput-f10 --mode throughput --fanout 10 --min-seconds "$S"
  run "$1" memory lat-f1 --mode latency --fanout 1
  run "$1" memory lat-f10 --mode latency --fanout 10
  run "$1" periodic durable-periodic-f1 --mode throughput --fanout 1 --min-seconds "$S"
  run "$1" on_commit durable-commit-w64 --mode throughput --ack --publishers 1 --window 64 --min-seconds "$S"
  run "$1" on_commit durable-commit-acklat --mode throughput --ack --publishers 1 --window 1 --min-seconds "$S"
}
for r in $(seq 1 "$RUNS"); do
  echo "# round $r of $RUNS" >&2
  cells A
  cells B
done

med() {  # LABEL FIELD
  jq -rs --arg l "$1" --arg f "$2" '
    [ .[] | select(.label == $l and .valid == true) | .[$f] | select(. != null) ] | sort
    | if length == 0 then "-" else .[(length - 1) / 2 | floor] end' "$J"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || a == 0) print "-"; else printf "%.2f", b / a }'; }
row() {  # LABEL FIELD TEXT
  local a b; a=$(med "A/$1" "$2"); b=$(med "B/$1" "$2")
  echo "| $3 | $a | $b | $(ratio "$a" "$b") |"
}
{
  echo "A = $A, B = $B; medians of $RUNS interleaved rounds, 1 KiB, one message per call" \
       "($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs)"
  echo
  echo "| cell | A | B | B / A |"
  echo "|---|---:|---:|---:|"
  row tput-f1 msgs_per_s "in memory, throughput fanout 1, deliveries/s"
  row tput-f10 msgs_per_s "in memory, throughput fanout 10, deliveries/s"
  for f in 1 10; do
    row "lat-f$f" p50_us "in memory, latency fanout $f, p50 us"
    row "lat-f$f" p99_us "in memory, latency fanout $f, p99 us"
  done
  row durable-periodic-f1 msgs_per_s "durable periodic, throughput fanout 1, deliveries/s"
  row durable-commit-w64 msgs_per_s "durable on_commit, acked, 64 in flight, msgs/s"
  row durable-commit-acklat p50_us "durable on_commit, acked, 1 in flight, publish -> ack p50 us"
  echo
  echo "JSONL: $J"
} | tee "$OUTDIR/table.md"
