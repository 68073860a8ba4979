#!/usr/bin/env bash
# cluster.sh - what running as a cluster costs (docs/cluster.md), in one run: a standalone broker
# and a three-node cluster on one etcd (scripts/cluster.sh), the same felix-bench cell on each.
#
# Cells, 1 KiB payloads, one message per publish call, each run twice: throughput fanout 1 (msg/s
# delivered) and latency (publish-to-delivery round trips one at a time, p50/p99), rounds
# interleaved so slow drift of a shared host falls on all of them alike:
#   standalone   a broker without cluster_ keys
#   owner        the cluster, felix-bench's publisher and subscriber connected to the node that owns
#                the stream (the steady state after one redirect: a redirected subscriber's
#                connection is to the owner)
#   via-other    the cluster, both connected to another node: the subscriber follows not_leader to
#                the owner, the publishes are forwarded to it (cluster_forward)
#   mirrored     the cluster, both connected to another node with felix-bench --no-redirect: a
#                subscriber without the redirect feature, served there from a local mirror of the
#                stream (docs/cluster.md "Mirror"); the publishes are forwarded to the owner
#   mirrored-sub the publisher at the owner, the subscriber (--no-redirect) at another node: the
#                mirror's own cost (felix-bench --sub-server)
# Also, each round: the transport's relay floor (felix-transport-bench relay --msg 1024), the goal
# bound of the forwarded and mirrored latency (owner p50 + floor). And: the etcd requests every node made during each cluster run (GET /v1/cluster etcd_requests,
# summed over the nodes, before and after): transactions per message must be 0.
#
# usage: bench/cluster.sh [--help]
# example:  RUNS=3 bench/cluster.sh
# env:
#   RUNS             rounds (default 3; medians shown)
#   SECONDS_PER_RUN  measured seconds of each run (default 10)
#   BUILD            build directory (default <repo>/build/bench; built if missing, not rebuilt)
#   OUTDIR           JSONL, logs and the table (default /tmp/felix-cluster-bench/<timestamp>)
#   FX_PORT, FX_ADMIN  the standalone broker's ports on 127.0.0.1 (default 15760, 18760)
# needs: curl, jq, etcd (scripts/deps.sh). Only the PIDs this script starts are signalled.
set -euo pipefail

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
RUNS=${RUNS:-3}
S=${SECONDS_PER_RUN:-10}
OUTDIR=${OUTDIR:-/tmp/felix-cluster-bench/$(date -u +%Y%m%dT%H%M%SZ)}
FX_PORT=${FX_PORT:-15760}
FX_ADMIN=${FX_ADMIN:-18760}
FX_TAG=cluster.sh
for t in curl jq; do
  command -v "$t" >/dev/null || { echo "$FX_TAG: needs $t" >&2; exit 1; }
done
mkdir -p "$OUTDIR"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
[ -x "$BUILD/felix" ] || cmake --build "$BUILD" --target felix -j2 >/dev/null
[ -x "$BUILD/felix-transport-bench" ] || cmake --build "$BUILD" --target felix-transport-bench -j2 >/dev/null
CL=$OUTDIR/cluster
cleanup() { fx_stop_broker; [ ! -f "$CL/cluster.env" ] || "$ROOT/scripts/cluster.sh" stop "$CL" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM
J=$OUTDIR/cluster.jsonl
log() { echo "# $(date -u +%T) $*" >&2; }
CELL=(--mode throughput --fanout 1 --payload 1024 --batch 1 --min-seconds "$S")
LAT=(--mode latency --fanout 1 --payload 1024 --total 20000)
# The lossless profile of bench/lib.sh's fx_start_broker, for the cluster's brokers too.
LOSSLESS="subscriber_queue_policy=block subscriber_lane_queue_policy=block pub_ingress_wait=true"

standalone() {
  fx_wait_quiet
  log standalone
  fx_start_broker "$OUTDIR/standalone.log" "$OUTDIR/standalone-state"
  fx_bench "${CELL[@]}" --label standalone >>"$J" 2>>"$OUTDIR/felix-bench.log" ||
    echo "$FX_TAG: standalone failed or was invalid (see $OUTDIR/felix-bench.log)" >&2
  fx_bench "${LAT[@]}" --label standalone-latency >>"$J" 2>>"$OUTDIR/felix-bench.log" ||
    echo "$FX_TAG: standalone latency failed or was invalid (see $OUTDIR/felix-bench.log)" >&2
  fx_stop_broker
}

etcd_txns() {  # the transactions and puts all nodes sent to etcd so far
  local sum=0 a v
  for a in "$N1_ADMIN" "$N2_ADMIN" "$N3_ADMIN"; do
    v=$(curl -s "http://$a/v1/cluster" | jq '.etcd_requests.txn + .etcd_requests.put')
    sum=$((sum + v))
  done
  echo "$sum"
}

clustered() {  # LABEL SERVER ADMIN PID [felix-bench options]
  local label=$1 server=$2 admin=$3 pid=$4 t0 t1 n
  shift 4
  local extra=("$@")
  fx_wait_quiet
  log "$label"
  t0=$(etcd_txns)
  "$BUILD/felix-bench" --server "$server" --pin "$FELIX_PIN" --admin "$admin" --broker-pid "$pid" \
    --json --quiet "${CELL[@]}" ${extra[@]+"${extra[@]}"} --label "$label" >"$OUTDIR/run.json" \
    2>>"$OUTDIR/felix-bench.log" ||
    echo "$FX_TAG: $label failed or was invalid (see $OUTDIR/felix-bench.log)" >&2
  t1=$(etcd_txns)
  n=$(jq -r '.delivered' "$OUTDIR/run.json" 2>/dev/null || echo 0)
  jq -c --argjson tx $((t1 - t0)) '. + {etcd_writes_during_run: $tx}' "$OUTDIR/run.json" >>"$J"
  log "$label: $n messages delivered, $((t1 - t0)) etcd transactions and puts meanwhile"
  "$BUILD/felix-bench" --server "$server" --pin "$FELIX_PIN" --admin "$admin" --broker-pid "$pid" \
    --json --quiet "${LAT[@]}" ${extra[@]+"${extra[@]}"} --label "$label-latency" >>"$J" \
    2>>"$OUTDIR/felix-bench.log" ||
    echo "$FX_TAG: $label latency failed or was invalid (see $OUTDIR/felix-bench.log)" >&2
}

relay() {  # the transport's own relay floor, 1 KiB, in the same round (felix-transport-bench)
  local out p50
  fx_wait_quiet
  log "relay floor"
  out=$("$BUILD/felix-transport-bench" relay --msg 1024 --rounds 10000 --warmup 1000 2>&1) ||
    { echo "$FX_TAG: felix-transport-bench relay failed: $out" >&2; return 0; }
  p50=$(sed -n 's/.* p50 \([0-9.]*\) .*/\1/p' <<<"$out" | head -n 1)
  [ -n "$p50" ] && jq -nc --argjson p "$p50" '{label: "relay-floor", p50_us: $p}' >>"$J"
}

log "starting the cluster"
FELIX_BROKER=$BUILD/felix-broker FX_CLUSTER_SET="$LOSSLESS log_level=warn" \
  "$ROOT/scripts/cluster.sh" start "$CL" 3 >"$OUTDIR/cluster-start.log" 2>&1 ||
  { echo "$FX_TAG: the cluster did not start ($OUTDIR/cluster-start.log)" >&2; exit 1; }
# shellcheck disable=SC1091
. "$CL/cluster.env"
# Place felix-bench's stream and find its owner.
"$BUILD/felix" pub --server "$N1_SERVER" --pin "$FELIX_PIN" --ack per_message t1/bench/bench0 \
  place >>"$OUTDIR/place.log" 2>&1
owner=$(curl -s "http://$N1_ADMIN/v1/cluster" |
  jq -r '.streams[] | select(.namespace == "bench" and .stream == "bench0") | .node')
case $owner in
  n1) O=(1 2) ;; n2) O=(2 3) ;; n3) O=(3 1) ;;
  *) echo "$FX_TAG: t1/bench/bench0 was not placed (owner '$owner')" >&2; exit 1 ;;
esac
srv() { eval "echo \$N$1_SERVER"; }
adm() { eval "echo \$N$1_ADMIN"; }
pid() { eval "echo \$N$1_PID"; }
log "t1/bench/bench0 is owned by $owner; the other node used is n${O[1]}"

for r in $(seq 1 "$RUNS"); do
  log "round $r of $RUNS"
  standalone
  clustered owner "$(srv "${O[0]}")" "$(adm "${O[0]}")" "$(pid "${O[0]}")"
  clustered via-other "$(srv "${O[1]}")" "$(adm "${O[0]}")" "$(pid "${O[0]}")"
  clustered mirrored "$(srv "${O[1]}")" "$(adm "${O[0]}")" "$(pid "${O[0]}")" --no-redirect
  clustered mirrored-sub "$(srv "${O[0]}")" "$(adm "${O[0]}")" "$(pid "${O[0]}")" --no-redirect \
    --sub-server "$(srv "${O[1]}")"
  relay
done

# ---- the table: medians per cell ----------------------------------------------------------------
jq -rs '
  def med: sort | if length == 0 then null else .[(length / 2 | floor)] end;
  group_by(.label) | map({label: .[0].label,
    msgs_per_s: (map(.msgs_per_s) | med), p50_us: (map(.p50_us) | med),
    p99_us: (map(.p99_us) | med), lost: (map(.lost // 0) | add), runs: length,
    etcd_writes: (map(.etcd_writes_during_run // 0) | add),
    delivered: (map(.delivered) | add)}) as $c
  | (INDEX($c[]; .label)) as $by
  | "| cell | msg/s | vs standalone | latency p50 us | vs standalone | p99 us | lost | etcd writes during the throughput runs (messages) |",
    "|---|---|---|---|---|---|---|---|",
    ($c[] | select((.label | endswith("-latency")) or .label == "relay-floor" | not) | . as $t
      | $by[$t.label + "-latency"] as $l
      | "| \($t.label) | \($t.msgs_per_s) | \(($t.msgs_per_s / $by.standalone.msgs_per_s * 100 | round) / 100)x | \($l.p50_us) | \((($l.p50_us / $by["standalone-latency"].p50_us - 1) * 1000 | round) / 10)% | \($l.p99_us) | \($t.lost) | \(if $t.label == "standalone" then "-" else "\($t.etcd_writes) (\($t.delivered))" end) |"),
    (if $by["relay-floor"] and $by["owner-latency"] then
      ($by["owner-latency"].p50_us + $by["relay-floor"].p50_us) as $goal
      | "",
        "relay floor (felix-transport-bench relay --msg 1024) p50: \($by["relay-floor"].p50_us) us; goal for via-other (a forwarded publish) and mirrored-sub (a mirrored subscribe): p50 <= owner p50 + floor = \($goal * 10 | round / 10) us",
        ($c[] | select(.label == "via-other-latency" or .label == "mirrored-sub-latency")
         | "  \(.label): \(.p50_us) us: \(if .p50_us <= $goal then "met" else "not met" end)")
     else empty end)
' "$J" | tee "$OUTDIR/table.md"
echo "$FX_TAG: JSONL $J, logs in $OUTDIR" >&2
