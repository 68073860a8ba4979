#!/usr/bin/env bash
# groups.sh - consumer groups: Felix-C against NATS JetStream (TLS) and Redis streams, cell by
# cell, on this machine, with the workload of ../shared/peers' --mode group (README.md there,
# "Consumer groups"): one stream, one group, C consumers (one connection and thread each) that
# take every record and ack each one; every delivery checked by the sequence in its payload.
#
# Felix-C: starts felix-broker (the Release build in BUILD) on 127.0.0.1 with the lossless
# profile (bench/lib.sh) and a stream ring that holds the whole backlog, then runs
# felix-bench --mode group for each cell:
#   log_capacity          GROUP_COUNT + 65536 records (at most 16,777,216, the key's maximum)
#   log_capacity_bytes    log_capacity x (PAYLOAD + 64) bytes (the ring charges payload + 16)
#   tenant_retained_bytes 0, retained_bytes_limit 0 (no limit evicts the backlog)
#   group_max_in_flight   GROUP_MAX_IN_FLIGHT (20000: the NATS consumer's MaxAckPending in
#                         peerbench), when the broker knows the key
# then, on a broker of its own with the default ring, felix-bench --mode throughput fanout 1 (one
# message per call) for the "live vs fanout-1 subscription" row; then, on a second broker with durable_default (storage
# under DIR, default ring), felix-bench --mode replay of at least GROUP_COUNT records (Felix-C's own
# catch-up replay of a backlog of the same size, from disk) for the "backlog drain vs catch-up
# replay" row, and the same backlog drained by a group on that durable stream (records below the
# ring read from the log). The peers: ../shared/peers/run-peers.sh nats-js-tls-group and redis-group, the
# same three cells. Every cell runs RUNS times; the table shows medians of the valid runs and
# how many runs were valid.
# Cells:
#   backlog     GROUP_COUNT records published first (one per publish call), the consumers start
#               once the broker holds them all: acked msg/s from the first delivery to the last ack
#   live        one publisher at most the credit window (4 MiB / payload) ahead of what the group
#               acked: acked msg/s over GROUP_LIVE_S seconds, publish -> delivery p50/p99
#   redelivery  member A takes 100 records and never acks them (Felix-C: A stays joined and
#               reads no more; its leases lapse), member B gets them again; lateness =
#               (B's delivery - A's) - ack wait (GROUP_ACK_WAIT_MS), p50/p99, as the clients see it
#               (under load A's own delivery is late too, which hides as much lateness) and as
#               the broker's histogram of the group has it (its timer firing - the deadline,
#               read from GET .../groups/G after the run; bucket upper bounds)
#
# usage: bench/groups.sh [--help]
#   e.g. RUNS=3 bench/groups.sh
#        GROUP_COUNT=200000 PEERS_RUN=0 REPLAY=0 bench/groups.sh     (a quick Felix-only pass)
# env:
#   RUNS               runs per cell (default 3; the table shows medians)
#   PAYLOAD            bytes per record (default 1024)
#   CONSUMERS          consumers of the backlog and live cells (default 4)
#   GROUP_COUNT        backlog records (default 1000000)
#   GROUP_LIVE_S       live cell: measured seconds (default 5)
#   GROUP_ACK_WAIT_MS  redelivery cell: ack wait (default 1000; the other cells: 30000)
#   WINDOW             Felix-C: records each member may hold unacked (default 256)
#   GROUP_MAX_IN_FLIGHT  Felix-C broker: group_max_in_flight (checkpoint 5g; default 20000)
#   PEERS_RUN          1 (default): also run the peers; 0 skips them
#   REPLAY             1 (default): also run the catch-up replay row; 0 skips it
#   LOADED             1 (default): also run the redelivery cell while another group takes
#                      LOAD_PCT (default 80) % of the live cell's median acked rate; 0 skips it
#   DIR                the replay broker's storage directory (default <repo>/build/groups-bench,
#                      created mode 0700; only the store made in it is removed)
#   BUILD              build directory (default <repo>/build/bench, configured Release if missing)
#   PEERS              the peers folder (default <repo>/../shared/peers)
#   OUTDIR             where JSONL and logs go (default /tmp/felix-groups/<timestamp>)
#   FX_PORT, FX_ADMIN  the broker's ports on 127.0.0.1 (default 15800, 18800)
#   QUIET_MAX_S        wait at most this long for a quiet host before each run (default 10)
# needs: jq; for the peers: nats-server libnats-dev redis-server libhiredis-dev
#        (scripts/deps.sh --peers; run-peers.sh builds peerbench)
# Memory: the backlog ring holds GROUP_COUNT x PAYLOAD bytes (about 1.1 GB with the defaults),
# as the peers hold theirs.
# Only the PIDs this script starts are signalled.
set -euo pipefail

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
  exit 0
fi
[ $# -eq 0 ] || { echo "groups: no arguments (settings are environment variables; see --help)" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
PEERS=${PEERS:-$ROOT/../shared/peers}
RUNS=${RUNS:-3}
PAYLOAD=${PAYLOAD:-1024}
CONSUMERS=${CONSUMERS:-4}
GROUP_COUNT=${GROUP_COUNT:-1000000}
GROUP_LIVE_S=${GROUP_LIVE_S:-5}
GROUP_ACK_WAIT_MS=${GROUP_ACK_WAIT_MS:-1000}
WINDOW=${WINDOW:-256}
GROUP_MAX_IN_FLIGHT=${GROUP_MAX_IN_FLIGHT:-20000}
PEERS_RUN=${PEERS_RUN:-1}
REPLAY=${REPLAY:-1}
LOADED=${LOADED:-1}
LOAD_PCT=${LOAD_PCT:-80}
DIR=${DIR:-$ROOT/build/groups-bench}
TS=$(date +%Y%m%dT%H%M%S)
OUTDIR=${OUTDIR:-/tmp/felix-groups/$TS}
FX_PORT=${FX_PORT:-15800}
FX_ADMIN=${FX_ADMIN:-18800}
export QUIET_MAX_S=${QUIET_MAX_S:-10}

die() { echo "groups: $*" >&2; exit 1; }
command -v jq >/dev/null || die "needs jq"
for v in RUNS PAYLOAD CONSUMERS GROUP_COUNT GROUP_LIVE_S GROUP_ACK_WAIT_MS WINDOW GROUP_MAX_IN_FLIGHT LOAD_PCT; do
  [[ ${!v} =~ ^[0-9]+$ ]] && [ "${!v}" -ge 1 ] || die "$v must be a whole number >= 1 (got '${!v}')"
done
[ "$GROUP_COUNT" -le 16777216 ] || die "GROUP_COUNT is at most 16777216 (a stream ring's log_capacity)"
[ "$PAYLOAD" -ge 16 ] || die "PAYLOAD must be at least 16 (sequence and send time)"

mkdir -p "$OUTDIR"
export FX_TAG=groups  # bench/lib.sh's messages
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
STORE=""
cleanup() { fx_stop_broker; [ -z "$STORE" ] || rm -rf -- "$STORE"; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

J=$OUTDIR/felix.jsonl
log() { echo "# $(date -u +%T) $*" >&2; }

# ---- Felix-C ---------------------------------------------------------------------
RING=$((GROUP_COUNT + 65536)); [ "$RING" -le 16777216 ] || RING=16777216
GROUP_SETS=(--set log_capacity="$RING" --set log_capacity_bytes=$((RING * (PAYLOAD + 64)))
            --set tenant_retained_bytes=0 --set retained_bytes_limit=0)
if "$BUILD/felix-broker" --print-config 2>/dev/null | grep -q group_max_in_flight; then
  GROUP_SETS+=(--set group_max_in_flight="$GROUP_MAX_IN_FLIGHT")
else
  log "this felix-broker has no group_max_in_flight key: its default applies"
fi

# felix LABEL [felix-bench args]...
felix() {
  local label=$1; shift
  fx_wait_quiet
  log "felix $label"
  fx_bench --payload "$PAYLOAD" --runs "$RUNS" --label "$label" "$@" >>"$J" 2>>"$OUTDIR/felix-bench.log" ||
    echo "# felix $label: some run failed or was invalid (see $OUTDIR/felix-bench.log)" >&2
}

fx_start_broker "$OUTDIR/broker-group.log" "$OUTDIR/state" "${GROUP_SETS[@]}"
felix group/backlog --mode group --group-cell backlog --consumers "$CONSUMERS" \
  --count "$GROUP_COUNT" --window "$WINDOW"
felix group/live --mode group --group-cell live --consumers "$CONSUMERS" --window "$WINDOW" \
  --min-seconds "$GROUP_LIVE_S"
felix group/redelivery --mode group --group-cell redelivery --ack-wait-ms "$GROUP_ACK_WAIT_MS"
if [ "$LOADED" = 1 ]; then
  # The same redelivery cell while another group on the broker takes LOAD_PCT % of the live
  # cell's median acked rate (a publisher capped with --rate, CONSUMERS members acking).
  live=$(jq -rs '[ .[] | select(.label == "group/live" and .valid == true) | .msgs_per_s ] | sort
    | if length == 0 then 0 else .[(length - 1) / 2 | floor] end' "$J")
  rate=$(awk -v l="$live" -v p="$LOAD_PCT" 'BEGIN { printf "%d", l * p / 100 }')
  if [ "$rate" -gt 0 ]; then
    load_s=$(( RUNS * (3 * GROUP_ACK_WAIT_MS / 1000 + 20) + 30 ))
    log "background load: a group at $rate acked msg/s ($LOAD_PCT % of $live) for up to $load_s s"
    # exec: $! is felix-bench itself, so the kill below stops it (not only a subshell).
    (exec "$BUILD/felix-bench" --server "127.0.0.1:$FX_PORT" --pin "$FP" --json --quiet \
      --payload "$PAYLOAD" --runs 1 --label group/load --mode group --group-cell live \
      --consumers "$CONSUMERS" --window "$WINDOW" --rate "$rate" --min-seconds "$load_s" \
      --max-seconds "$((load_s + 30))" >>"$OUTDIR/load.jsonl" 2>>"$OUTDIR/load.log") &
    LOAD_PID=$!
    sleep 3
    QUIET_MAX_S=0 felix group/redelivery-loaded --mode group --group-cell redelivery \
      --ack-wait-ms "$GROUP_ACK_WAIT_MS"
    kill "$LOAD_PID" 2>/dev/null || true
    wait "$LOAD_PID" 2>/dev/null || true
  else
    log "no valid live run: the loaded redelivery cell is skipped"
  fi
fi
fx_stop_broker
# The fanout-1 reference on a broker of its own, with the default ring: the group broker
# holds the backlogs of every run (GBs of retained records), which slows a subscription.
fx_start_broker "$OUTDIR/broker-tput.log" "$OUTDIR/state"
felix tput/f1 --mode throughput --fanout 1 --batch 1
fx_stop_broker

if [ "$REPLAY" = 1 ]; then
  (umask 077 && mkdir -p "$DIR") || die "cannot create $DIR"
  STORE=$(cd "$DIR" && pwd)/store
  rm -rf -- "$STORE"
  (umask 077 && mkdir -p "$STORE")
  fx_start_broker "$OUTDIR/broker-replay.log" "$OUTDIR/state" \
    --set durable_storage_dir="$STORE" --set durable_default=true
  felix replay --mode replay --total "$GROUP_COUNT"
  # The same backlog drained by a group on a durable stream: the default ring holds the
  # newest records only, the rest come from the log one page per group (like for like with
  # the replay above).
  felix group/backlog-durable --mode group --group-cell backlog --consumers "$CONSUMERS" \
    --count "$GROUP_COUNT" --window "$WINDOW"
  fx_stop_broker
  rm -rf -- "$STORE"
fi

# ---- the peers ------------------------------------------------------------------------
peer() {  # BACKEND CELL CONSUMERS
  local cell="$1_$2_p${PAYLOAD}_f$3"
  log "$1 $2"
  OUTDIR="$OUTDIR/peers" GROUP_COUNT="$GROUP_COUNT" GROUP_LIVE_S="$GROUP_LIVE_S" \
    GROUP_ACK_WAIT_MS="$GROUP_ACK_WAIT_MS" \
    "$PEERS/run-peers.sh" "$1" "$2" "$PAYLOAD" "$3" "$RUNS" >>"$OUTDIR/peers.jsonl" \
    2>"$OUTDIR/$cell.log" || echo "# $cell failed (see $OUTDIR/$cell.log)" >&2
}
if [ "$PEERS_RUN" = 1 ]; then
  for b in nats-js-tls-group redis-group; do
    peer "$b" backlog "$CONSUMERS"
    peer "$b" live "$CONSUMERS"
    peer "$b" redelivery 2
  done
fi
touch "$OUTDIR/peers.jsonl"

# ---- the table ------------------------------------------------------------------------
med() {  # FILE LABEL FIELD -> median over valid runs, or "-"
  jq -rs --arg l "$2" --arg f "$3" '
    [ .[] | select(.label == $l and .valid == true) | .[$f] | select(. != null) ] | sort
    | if length == 0 then "-" else .[(length - 1) / 2 | floor] end' "$1"
}
valid() {  # FILE LABEL -> "valid/runs"
  jq -rs --arg l "$2" '[ .[] | select(.label == $l) ] | "\([ .[] | select(.valid == true) ] | length)/\(length)"' "$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
nats() { echo "nats-js-tls-group_$1_p${PAYLOAD}_f$2"; }
redis() { echo "redis-group_$1_p${PAYLOAD}_f$2"; }
P=$OUTDIR/peers.jsonl
row() {  # TEXT CELL CONSUMERS FIELD
  local a b c
  a=$(med "$J" "group/$2" "$4"); b=$(med "$P" "$(nats "$2" "$3")" "$4"); c=$(med "$P" "$(redis "$2" "$3")" "$4")
  echo "| $1 | $a | $b | $c | $(ratio "$a" "$b") | $(ratio "$a" "$c") |"
}

{
  echo "Consumer groups: Felix-C vs NATS JetStream TLS and Redis streams, medians of valid runs"
  echo "($RUNS runs per cell), payload $PAYLOAD B, $CONSUMERS consumers, backlog $GROUP_COUNT records,"
  echo "Felix-C member window $WINDOW ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs)"
  echo
  echo "| cell | Felix-C | NATS JetStream TLS | Redis | Felix / NATS | Felix / Redis |"
  echo "|---|---:|---:|---:|---:|---:|"
  row "backlog drain, acked msg/s" backlog "$CONSUMERS" msgs_per_s
  row "live, acked msg/s" live "$CONSUMERS" msgs_per_s
  row "live, publish -> delivery p50 us" live "$CONSUMERS" p50_us
  row "live, publish -> delivery p99 us" live "$CONSUMERS" p99_us
  row "redelivery lateness p50 ms" redelivery 2 lateness_p50_ms
  row "redelivery lateness p99 ms" redelivery 2 lateness_p99_ms
  echo "| redelivery lateness p50 / p99 ms, the broker's own histogram (timer - deadline, bucket bounds) | $(med "$J" group/redelivery broker_lateness_p50_ms) / $(med "$J" group/redelivery broker_lateness_p99_ms) | | | | |"
  if [ "$LOADED" = 1 ]; then
    echo "| redelivery lateness p50 / p99 ms, another group at $LOAD_PCT % of the live rate: clients | $(med "$J" group/redelivery-loaded lateness_p50_ms) / $(med "$J" group/redelivery-loaded lateness_p99_ms) | | | | |"
    echo "| the same, the broker's own histogram | $(med "$J" group/redelivery-loaded broker_lateness_p50_ms) / $(med "$J" group/redelivery-loaded broker_lateness_p99_ms) | | | | |"
  fi
  for c in backlog live redelivery; do
    n=$CONSUMERS; [ $c = redelivery ] && n=2
    echo "| $c: valid runs | $(valid "$J" "group/$c") | $(valid "$P" "$(nats $c "$n")") | $(valid "$P" "$(redis $c "$n")") | | |"
  done
  echo
  echo "| Felix-C against itself | group | reference | group / reference |"
  echo "|---|---:|---:|---:|"
  a=$(med "$J" group/backlog-durable msgs_per_s); b=$(med "$J" replay replay_msgs_per_s)
  echo "| backlog drain of a durable stream ($CONSUMERS consumers, records below the ring read from the log) vs catch-up replay of >= $GROUP_COUNT records from disk (goal >= 0.5) | $a | $b | $(ratio "$a" "$b") |"
  a=$(med "$J" group/backlog msgs_per_s); b=$(med "$J" replay replay_msgs_per_s)
  echo "| backlog drain ($CONSUMERS consumers, acked msg/s) vs catch-up replay of >= $GROUP_COUNT records from disk (one subscriber, msg/s; goal >= 0.5) | $a | $b | $(ratio "$a" "$b") |"
  a=$(med "$J" group/live msgs_per_s); b=$(med "$J" tput/f1 msgs_per_s)
  echo "| live group (acked msg/s) vs fanout-1 subscription throughput (one message per call, msg/s) | $a | $b | $(ratio "$a" "$b") |"
  echo
  echo "Dups / missing / redelivered per Felix-C run (any dup or missing record makes a run invalid):"
  jq -r 'select(.mode == "group") | "  \(.label) run \(.run): dups \(.dups) missing \(.missing) redelivered \(.redelivered) skipped \(.skipped) valid \(.valid)\(if .valid then "" else " (" + (.invalid_reason // .error // "") + ")" end)"' "$J" 2>/dev/null || true
  echo
  echo "Foreign load (other_cpu_s, median): Felix-C backlog $(med "$J" group/backlog other_cpu_s)," \
       "NATS backlog $(med "$P" "$(nats backlog "$CONSUMERS")" other_cpu_s)," \
       "Redis backlog $(med "$P" "$(redis backlog "$CONSUMERS")" other_cpu_s)"
  echo
  echo "JSONL: $J $P; logs in $OUTDIR"
} | tee "$OUTDIR/table.md"
