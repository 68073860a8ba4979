#!/usr/bin/env bash
# compare-peers.sh - Felix-C against NATS with TLS, cell by cell, on this machine.
#
# Starts felix-broker (Release build) on 127.0.0.1 with the lossless profile
# (subscriber_queue_policy / subscriber_lane_queue_policy block, pub_ingress_wait)
# and runs felix-bench against it, then ../shared/peers/run-peers.sh nats-tls for
# the same cells, and prints one table of medians (Felix-C, NATS TLS, ratio, bar).
#
# usage: bench/compare-peers.sh
# env:
#   RUNS       runs per cell (default 3; the table shows medians)
#   PROFILES   Felix broker profiles to measure (default "default nodelay wide wide-nodelay"):
#                default  the shipped defaults + the lossless profile
#                nodelay  + event_batch_max_delay_us=0 (feeders do not wait to coalesce)
#                wide     + event_batch_max_bytes=131072, subscriber_max_bytes_per_write=131072
#                         (a 64 x 1 KiB publish batch fits one shared event frame)
#                wide-nodelay  both
#   DGRAM1452  1 (default): also run throughput fanout 10 with 1452-byte datagrams,
#              under profile DGRAM_PROFILE (default: the last of PROFILES)
#   BUILD      build directory (default <repo>/build/bench, configured Release if missing)
#   PEERS      the peers folder (default <repo>/../shared/peers)
#   OUTDIR     where JSONL and logs go (default /tmp/felix-compare/<timestamp>)
#   QUIET_MAX_S  passed to run-peers.sh (default 10: wait at most 10 s for a quiet host)
# needs: scripts/deps.sh --peers (nats-server libnats-dev redis-server libhiredis-dev mosquitto
#        libmosquitto-dev jq)
# Cells: 1 KiB throughput fanout 1 and 10, each twice: one message per publish call (the
# peers' shape, felix-bench's default --batch 1) and --batch 64 (64 messages per
# fx_publish_batch call), both beside NATS TLS, which publishes one message per call; 1 KiB
# latency fanout 1 and 10 (20,000 round trips).
# Only the one-per-call row is held to the bar; the --batch 64 row is reported beside it, with
# the one-per-call / --batch 64 ratio.
# Only the PIDs this script starts are signalled.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
PEERS=${PEERS:-$ROOT/../shared/peers}
RUNS=${RUNS:-3}
PROFILES=${PROFILES:-default nodelay wide wide-nodelay}
DGRAM_PROFILE=${DGRAM_PROFILE:-${PROFILES##* }}
DGRAM1452=${DGRAM1452:-1}
TS=$(date +%Y%m%dT%H%M%S)
OUTDIR=${OUTDIR:-/tmp/felix-compare/$TS}
FX_PORT=${FX_PORT:-15000}
FX_ADMIN=${FX_ADMIN:-18080}
mkdir -p "$OUTDIR"
command -v jq >/dev/null || { echo "compare-peers: needs jq" >&2; exit 1; }

FX_TAG=compare-peers
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
fx_traps

# start_broker NAME [--set k=v]...: the lossless profile plus the extra keys.
start_broker() {
  local name=$1; shift
  fx_start_broker "$OUTDIR/broker-$name.log" "$OUTDIR/state" "$@"
}

# felix LABEL MODE FANOUT [felix-bench args]...
felix() {
  local label=$1 mode=$2 fanout=$3; shift 3
  fx_wait_quiet
  echo "# felix $label" >&2
  fx_bench --mode "$mode" --payload 1024 --fanout "$fanout" --runs "$RUNS" --label "$label" "$@" \
    >>"$OUTDIR/felix.jsonl" 2>>"$OUTDIR/felix-bench.log" ||
    echo "# felix $label: some run failed (see $OUTDIR/felix-bench.log)" >&2
}

felix_cells() {  # PROFILE
  local p=$1
  felix "$p/tput/f1" throughput 1 --batch 1
  felix "$p/tput/f10" throughput 10 --batch 1
  felix "$p/tput-b64/f1" throughput 1 --batch 64
  felix "$p/tput-b64/f10" throughput 10 --batch 64
  felix "$p/lat/f1" latency 1
  felix "$p/lat/f10" latency 10
}

# profile_sets NAME: the --set arguments of a profile (on top of the lossless ones).
profile_sets() {
  local wide=(--set event_batch_max_bytes=131072 --set subscriber_max_bytes_per_write=131072)
  case $1 in
    default) SETS=() ;;
    nodelay) SETS=(--set event_batch_max_delay_us=0) ;;
    wide) SETS=("${wide[@]}") ;;
    wide-nodelay) SETS=("${wide[@]}" --set event_batch_max_delay_us=0) ;;
    *) echo "compare-peers: unknown profile $1" >&2; exit 2 ;;
  esac
}

for p in $PROFILES; do
  profile_sets "$p"
  start_broker "$p" "${SETS[@]}"
  felix_cells "$p"
  fx_stop_broker
done
if [ "$DGRAM1452" = 1 ]; then
  profile_sets "$DGRAM_PROFILE"
  start_broker dgram1452 "${SETS[@]}" --set loopback_mtu=1452
  felix "$DGRAM_PROFILE/tput/f10/1452" throughput 10 --mtu 1452 --batch 1
  fx_stop_broker
fi

# NATS with TLS, the same cells.
nats() {  # MODE FANOUT
  local cell="nats-tls_$1_p1024_f$2"
  echo "# nats-tls $1 fanout $2" >&2
  OUTDIR="$OUTDIR/peers" QUIET_MAX_S=${QUIET_MAX_S:-10} LAT_N=20000 \
    "$PEERS/run-peers.sh" nats-tls "$1" 1024 "$2" "$RUNS" >>"$OUTDIR/nats.jsonl" \
    2>"$OUTDIR/nats-$1-f$2.log" || echo "# nats $cell failed (see $OUTDIR/nats-$1-f$2.log)" >&2
  local rss
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): *\([0-9]*\).*/\1/p' "$OUTDIR/nats-$1-f$2.log")
  echo "{\"label\":\"$cell\",\"nats_peak_rss_kb\":${rss:-null}}" >>"$OUTDIR/nats-rss.jsonl"
}
nats throughput 1
nats throughput 10
nats latency 1
nats latency 10

# ---- the table --------------------------------------------------------------------
med() {  # FILE LABEL FIELD -> median over valid runs, or "-"
  jq -rs --arg l "$2" --arg f "$3" '
    [ .[] | select(.label == $l and .valid == true) | .[$f] | select(. != null) ] | sort
    | if length == 0 then "-" else .[(length - 1) / 2 | floor] end' "$1"
}
maxf() {  # FILE LABEL FIELD -> largest value
  jq -rs --arg l "$2" --arg f "$3" '
    [ .[] | select(.label == $l) | .[$f] | select(. != null) ] | if length == 0 then "-" else max end' "$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
verdict() {  # RATIO OP BAR
  awk -v r="$1" -v op="$2" -v b="$3" 'BEGIN {
    if (r == "-") { print "no data"; exit }
    ok = (op == ">=") ? (r + 0 >= b + 0) : (r + 0 <= b + 0)
    print (ok ? "met" : "NOT met") " (bar " op " " b ")" }'
}

{
  echo "Felix-C vs NATS TLS, medians of $RUNS runs, 1 KiB payload ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs)"
  echo
  echo "| profile | cell | Felix-C | NATS TLS | ratio | bar |"
  echo "|---|---|---:|---:|---:|---|"
  for p in $PROFILES; do
    for f in 1 10; do
      a=$(med "$OUTDIR/felix.jsonl" "$p/tput/f$f" msgs_per_s)
      b=$(med "$OUTDIR/nats.jsonl" "nats-tls_throughput_p1024_f$f" msgs_per_s)
      bar=$([ $f = 1 ] && echo 1.5 || echo 2)
      echo "| $p | throughput fanout $f, one message per call, deliveries/s | $a | $b | $(ratio "$a" "$b") | $(verdict "$(ratio "$a" "$b")" ">=" $bar) |"
      c=$(med "$OUTDIR/felix.jsonl" "$p/tput-b64/f$f" msgs_per_s)
      echo "| $p | throughput fanout $f, --batch 64, deliveries/s | $c | - | - | (batch path, not compared with the peers, who publish one message per call; one per call / --batch 64 = $(ratio "$a" "$c")) |"
    done
    for f in 1 10; do
      bar=$([ $f = 1 ] && echo 1 || echo 0.75)
      for q in p50_us p99_us; do
        a=$(med "$OUTDIR/felix.jsonl" "$p/lat/f$f" $q)
        b=$(med "$OUTDIR/nats.jsonl" "nats-tls_latency_p1024_f$f" $q)
        echo "| $p | latency fanout $f, $q | $a | $b | $(ratio "$a" "$b") | $(verdict "$(ratio "$a" "$b")" "<=" $bar) |"
      done
    done
    for f in 1 10; do
      a=$(maxf "$OUTDIR/felix.jsonl" "$p/tput/f$f" peak_rss_kb)
      b=$(maxf "$OUTDIR/nats-rss.jsonl" "nats-tls_throughput_p1024_f$f" nats_peak_rss_kb)
      echo "| $p | throughput fanout $f, broker peak RSS kB | $a | $b | $(ratio "$a" "$b") | $(verdict "$(ratio "$a" "$b")" "<=" 2) |"
    done
  done
  if [ "$DGRAM1452" = 1 ]; then
    l="$DGRAM_PROFILE/tput/f10/1452"
    a=$(med "$OUTDIR/felix.jsonl" "$l" msgs_per_s)
    b=$(med "$OUTDIR/nats.jsonl" "nats-tls_throughput_p1024_f10" msgs_per_s)
    echo "| $DGRAM_PROFILE | throughput fanout 10, 1452-byte datagrams | $a | $b | $(ratio "$a" "$b") | (reported beside the bar) |"
  fi
  echo
  echo "Foreign load: median CPU seconds the host spent outside the benchmark and its broker"
  echo "per run (other_cpu_s; a 5 s run on 2 CPUs has 10 CPU seconds):"
  for f in 1 10; do
    echo "  NATS TLS throughput fanout $f: $(med "$OUTDIR/nats.jsonl" "nats-tls_throughput_p1024_f$f" other_cpu_s)"
    for p in $PROFILES; do
      echo "  $p throughput fanout $f: $(med "$OUTDIR/felix.jsonl" "$p/tput/f$f" other_cpu_s)"
    done
  done
  echo
  echo "Wakeups (voluntary context switches per round trip, latency cells):"
  for p in $PROFILES; do
    for f in 1 10; do
      echo "  $p fanout $f: client $(med "$OUTDIR/felix.jsonl" "$p/lat/f$f" client_vcsw_per_msg)," \
           "broker $(med "$OUTDIR/felix.jsonl" "$p/lat/f$f" server_vcsw_per_msg)"
    done
  done
  echo
  echo "JSONL: $OUTDIR/felix.jsonl $OUTDIR/nats.jsonl"
} | tee "$OUTDIR/table.md"
