#!/usr/bin/env bash
# durable.sh - the durable-stream goals table (docs/durability.md), measured on this machine.
#
# Builds nothing: it runs the Release binaries in BUILD (felix-broker, felix-bench, felix), like
# the other bench scripts. Every Felix cell runs against a fresh felix-broker on 127.0.0.1 with the
# lossless profile (bench/lib.sh) and, for durable cells, durable_default=true with its storage
# under DIR, which is emptied before each run. Cells are measured in RUNS interleaved rounds (one
# run of every cell per round) and the table shows medians over the valid runs:
#   throughput 1 KiB, one message per call, fanout 1 and 10: in memory, durable none, periodic
#   fsync probe (felix-bench --mode fsync-probe: 1,052-byte records, fdatasync every 64) and the
#     disk's sustained write rate (dd bs=1M count=1024 conv=fdatasync in DIR)
#   acked on_commit, one publisher, 64 in flight (--mode throughput --ack --publishers 1 --window 64),
#     with the fdatasync on the storage thread (the default) and with durable_flush_pipeline=true
#     (on a sync thread while appends go on) in the same rounds
#   acked one in flight, publish -> ack latency (--mode throughput --ack --publishers 1
#   --window 1): in memory, periodic, on_commit
#   catch-up replay from disk vs live delivery (--mode replay, periodic)
#   felix log verify of VERIFY_GIB GiB of segments: page cache warm, and cold (caches dropped)
#     beside a plain sequential read (cat) of the same segment files, cold
#   NATS JetStream with TLS (../shared/peers/run-peers.sh nats-js-tls): throughput fanout 1 and
#     10, and latency with --js-sync (publish -> ack p50)
# The VERIFY_GIB GiB of segments are made by publishing through a broker (durable periodic,
# felix-bench throughput fanout 1 with --total of that many 1,052-byte records; a throughput run
# lasts at least 5 s, so a small VERIFY_GIB gives more): the same write path as the other cells,
# so the log is one a broker wrote. The table names the size verified.
#
# usage: bench/durable.sh
# env:
#   RUNS             rounds (default 3; the table shows medians)
#   SECONDS_PER_RUN  measured seconds of each throughput, acked and probe run (default 30)
#   REPLAY_SECONDS   live phase of each replay run (default SECONDS_PER_RUN)
#   LAT_TOTAL        round trips per JetStream latency run (default 20000)
#   ACK_SECONDS      length of each one-in-flight acked run (default 10)
#   VERIFY_GIB       GiB of segments for the verify cells (default 4, fractions allowed: 0.25;
#                    0 skips them)
#   DIR              storage directory on the disk to measure (default <repo>/build/durable-bench,
#                    created mode 0700; a tmpfs or ramfs is refused; the script removes only what
#                    it creates in it; the broker refuses a storage root another user owns or can
#                    write, so keep it out of shared places such as /var/tmp)
#   PEERS_RUN        1 (default): also run NATS JetStream TLS; 0 skips it
#   BUILD            build directory (default <repo>/build/bench)
#   PEERS            the peers folder (default <repo>/../shared/peers)
#   OUTDIR           where JSONL and logs go (default /tmp/felix-durable/<timestamp>)
#   FX_PORT, FX_ADMIN  the broker's ports on 127.0.0.1 (default 15700, 18700)
#   QUIET_MAX_S      wait at most this long for a quiet host before each cell (default 10)
#   COLD             how the cold verify cells empty the page cache: drop (the default as root:
#                    sync; echo 3 > /proc/sys/vm/drop_caches) or file (the default otherwise: sync,
#                    then evict only the segment files' pages, dd iflag=nocache count=0, which
#                    needs no root and leaves the rest of the machine's cache alone)
# needs: jq; for JetStream: nats-server libnats-dev (scripts/deps.sh --peers; run-peers.sh builds
# peerbench)
# Only the PIDs this script starts are signalled.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
PEERS=${PEERS:-$ROOT/../shared/peers}
RUNS=${RUNS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-30}
REPLAY_SECONDS=${REPLAY_SECONDS:-$SECONDS_PER_RUN}
LAT_TOTAL=${LAT_TOTAL:-20000}
ACK_SECONDS=${ACK_SECONDS:-10}
VERIFY_GIB=${VERIFY_GIB:-4}
DIR=${DIR:-$ROOT/build/durable-bench}
PEERS_RUN=${PEERS_RUN:-1}
if [ -w /proc/sys/vm/drop_caches ]; then COLD=${COLD:-drop}; else COLD=${COLD:-file}; fi
TS=$(date +%Y%m%dT%H%M%S)
OUTDIR=${OUTDIR:-/tmp/felix-durable/$TS}
FX_PORT=${FX_PORT:-15700}
FX_ADMIN=${FX_ADMIN:-18700}
export FX_TAG=durable  # bench/lib.sh's messages

die() { echo "durable: $*" >&2; exit 1; }
command -v jq >/dev/null || die "needs jq"
for b in felix-broker felix-bench felix; do
  [ -x "$BUILD/$b" ] || die "$BUILD/$b is missing: build it first (cmake -S $ROOT -B $BUILD" \
    "-DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD --target felix-broker felix-bench felix)"
done
for v in RUNS SECONDS_PER_RUN REPLAY_SECONDS LAT_TOTAL ACK_SECONDS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number (got '${!v}')"
done
[[ $VERIFY_GIB =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "VERIFY_GIB must be a number of GiB, e.g. 4 or 0.25 (got '$VERIFY_GIB')"
VERIFY_MSGS=$(awk -v g="$VERIFY_GIB" 'BEGIN { printf "%.0f", g * 1073741824 / 1052 }')
case $COLD in drop|file) ;; *) die "COLD must be drop or file (got '$COLD')" ;; esac
if [ "$RUNS" -lt 1 ] || [ "$SECONDS_PER_RUN" -lt 1 ] || [ "$REPLAY_SECONDS" -lt 1 ]; then
  die "RUNS, SECONDS_PER_RUN and REPLAY_SECONDS must be at least 1"
fi
# felix-bench's run-length guard refuses throughput runs under 5 s.
[ "$SECONDS_PER_RUN" -ge 5 ] || { echo "durable: SECONDS_PER_RUN below 5 is raised to 5" >&2; SECONDS_PER_RUN=5; }
[ "$REPLAY_SECONDS" -ge 5 ] || REPLAY_SECONDS=5

mkdir -p "$OUTDIR"
(umask 077 && mkdir -p "$DIR") || die "cannot create $DIR"
DIR=$(cd "$DIR" && pwd)
FSTYPE=$(stat -f -c %T "$DIR")
case $FSTYPE in
  tmpfs|ramfs) die "$DIR is on $FSTYPE: fdatasync does nothing there; set DIR to a directory on a real disk" ;;
esac
STORE=$DIR/store PROBE=$DIR/probe DD=$DIR/dd.bin
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
cleanup() { fx_stop_broker; rm -rf "$STORE" "$PROBE" "$DD"; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

J=$OUTDIR/felix.jsonl
log() { echo "# $(date -u +%T) $*" >&2; }

# start MEMORY|none|periodic|on_commit[:pipeline]: a fresh broker (and an empty store for
# durable ones); ":pipeline" sets durable_flush_pipeline=true.
start() {
  local sets=() mode=${1%%:*}
  rm -rf "$STORE"
  if [ "$mode" != memory ]; then
    (umask 077 && mkdir -p "$STORE")
    sets=(--set durable_storage_dir="$STORE" --set durable_default=true --set durable_fsync_mode="$mode")
    [ "$1" = "$mode:pipeline" ] && sets+=(--set durable_flush_pipeline=true)
  fi
  fx_start_broker "$OUTDIR/broker.log" "$OUTDIR/state" "${sets[@]}"
}

# cell POLICY LABEL felix-bench-args...: one run on a fresh broker, its JSON line into $J.
cell() {
  local policy=$1 label=$2; shift 2
  fx_wait_quiet
  log "$label"
  start "$policy"
  fx_bench --payload 1024 --label "$label" "$@" >>"$J" 2>>"$OUTDIR/felix-bench.log" ||
    echo "durable: $label: the run failed or was invalid (see $OUTDIR/felix-bench.log)" >&2
  fx_stop_broker
  rm -rf "$STORE"
}

# probe: felix-bench --mode fsync-probe (no broker).
probe() {
  fx_wait_quiet
  log probe
  mkdir -p "$PROBE"
  "$BUILD/felix-bench" --mode fsync-probe --dir "$PROBE" --payload 1024 --sync-every 64 \
    --min-seconds "$SECONDS_PER_RUN" --json --quiet --label probe >>"$J" 2>>"$OUTDIR/felix-bench.log" ||
    echo "durable: probe failed (see $OUTDIR/felix-bench.log)" >&2
  rmdir "$PROBE"
}

now_ns() { date +%s%N; }
# jline LABEL KEY VALUE...: one JSON line of our own into $J.
jline() {
  local label=$1; shift
  local args=(--arg lbl "$label") expr='{"label": $lbl, "valid": true'
  while [ $# -ge 2 ]; do args+=(--argjson "$1" "$2"); expr+=", \"$1\": \$$1"; shift 2; done
  jq -nc "${args[@]}" "$expr}" >>"$J"
}

# disk: the sustained sequential write rate, 1 GiB with one fdatasync at the end.
disk() {
  fx_wait_quiet
  log "dd 1 GiB"
  local t0 t1
  t0=$(now_ns)
  dd if=/dev/zero of="$DD" bs=1M count=1024 conv=fdatasync status=none
  t1=$(now_ns)
  rm -f "$DD"
  jline dd-write mb_per_s "$(awk -v b=1073741824 -v ns=$((t1 - t0)) 'BEGIN { printf "%.1f", b / (ns / 1e9) / 1e6 }')"
}

S=$SECONDS_PER_RUN
for round in $(seq 1 "$RUNS"); do
  log "round $round of $RUNS"
  for f in 1 10; do
    cell memory "mem-f$f" --mode throughput --fanout "$f" --min-seconds "$S"
    cell none "none-f$f" --mode throughput --fanout "$f" --min-seconds "$S"
    cell periodic "periodic-f$f" --mode throughput --fanout "$f" --min-seconds "$S"
  done
  probe
  disk
  cell on_commit commit-w64 --mode throughput --ack --publishers 1 --window 64 --min-seconds "$S"
  cell on_commit:pipeline commit-w64-pipeline --mode throughput --ack --publishers 1 --window 64 --min-seconds "$S"
  cell memory mem-acklat --mode throughput --ack --publishers 1 --window 1 --min-seconds "$ACK_SECONDS"
  cell periodic periodic-acklat --mode throughput --ack --publishers 1 --window 1 --min-seconds "$ACK_SECONDS"
  cell on_commit commit-acklat --mode throughput --ack --publishers 1 --window 1 --min-seconds "$ACK_SECONDS"
  cell periodic replay --mode replay --min-seconds "$REPLAY_SECONDS"
done

# ---- felix log verify of VERIFY_GIB GiB of segments ------------------------------------
drop_caches() {
  sync
  if [ "$COLD" = drop ]; then
    echo 3 >/proc/sys/vm/drop_caches
  else
    local f
    for f in "${SEGS[@]}"; do dd if="$f" iflag=nocache count=0 status=none; done
  fi
}
# timed LABEL BYTES COMMAND...: runs COMMAND, records GB/s of BYTES over its wall time.
timed() {
  local label=$1 bytes=$2; shift 2
  local t0 t1
  t0=$(now_ns)
  if ! "$@" >"$OUTDIR/$label.out" 2>&1; then
    echo "durable: $label failed:" >&2; cat "$OUTDIR/$label.out" >&2; return 0
  fi
  t1=$(now_ns)
  jline "$label" gb_per_s "$(awk -v b="$bytes" -v ns=$((t1 - t0)) 'BEGIN { printf "%.3f", b / (ns / 1e9) / 1e9 }')"
}
if [ "$VERIFY_MSGS" -gt 0 ]; then
  log "writing $VERIFY_GIB GiB of segments through the broker"
  start periodic
  fx_bench --payload 1024 --mode throughput --fanout 1 --label verify-fill \
    --total "$VERIFY_MSGS" --min-seconds 5 --max-seconds 3600 \
    >>"$OUTDIR/verify-fill.jsonl" 2>>"$OUTDIR/felix-bench.log" ||
    echo "durable: writing the segments failed (see $OUTDIR/felix-bench.log)" >&2
  fx_stop_broker  # drains: every durable stream flushed
  SEGDIR=$(find "$STORE" -name '*.log' -printf '%h\n' | sort -u)
  [ "$(printf '%s\n' "$SEGDIR" | grep -c .)" = 1 ] || die "expected one stream directory under $STORE"
  SEGS=("$SEGDIR"/*.log)
  BYTES=$(cat "${SEGS[@]}" | wc -c)
  log "verify: ${#SEGS[@]} segments, $BYTES bytes in $SEGDIR"
  for round in $(seq 1 "$RUNS"); do
    fx_wait_quiet
    cat "${SEGS[@]}" >/dev/null  # warm
    timed verify-warm "$BYTES" "$BUILD/felix" log verify "$SEGDIR"
    drop_caches; timed verify-cold "$BYTES" "$BUILD/felix" log verify "$SEGDIR"
    drop_caches; timed cat-cold "$BYTES" sh -c 'cat "$@" >/dev/null' cat "${SEGS[@]}"
  done
  rm -rf "$STORE"
fi

# ---- NATS JetStream with TLS -------------------------------------------------------------
js() {  # NAME MODE FANOUT [-- args]
  local name=$1 mode=$2 fanout=$3; shift 3
  log "nats-js-tls $name"
  OUTDIR="$OUTDIR/peers" QUIET_MAX_S=${QUIET_MAX_S:-10} LAT_N=$LAT_TOTAL \
    "$PEERS/run-peers.sh" nats-js-tls "$mode" 1024 "$fanout" "$RUNS" "$@" \
    >"$OUTDIR/js-$name.jsonl" 2>"$OUTDIR/js-$name.log" ||
    echo "durable: nats-js-tls $name failed (see $OUTDIR/js-$name.log)" >&2
}
if [ "$PEERS_RUN" = 1 ]; then
  js f1 throughput 1
  js f10 throughput 10
  js sync latency 1 -- --js-sync
fi

# ---- the table ----------------------------------------------------------------------------
med() {  # FILE LABEL FIELD -> median over valid runs, or "-"
  [ -s "$1" ] || { echo -; return; }
  jq -rs --arg l "$2" --arg f "$3" '
    [ .[] | select((.label == $l or $l == "*") and .valid == true) | .[$f] | select(. != null) ] | sort
    | if length == 0 then "-" else .[(length - 1) / 2 | floor] end' "$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
minf() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-") print b; else if (b == "-") print a; else print (a + 0 < b + 0 ? a : b) }'; }
sumf() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.1f", a + b }'; }
verdict() {  # RATIO OP BAR
  awk -v r="$1" -v op="$2" -v b="$3" 'BEGIN {
    if (r == "-") { print "no data"; exit }
    ok = (op == ">=") ? (r + 0 >= b + 0) : (r + 0 <= b + 0)
    print (ok ? "met" : "NOT met") " (bar " op " " b ")" }'
}
row() {  # CELL OURS BASE RATIO OP BAR
  echo "| $1 | $2 | $3 | $4 | $(verdict "$4" "$5" "$6") |"
}

DD_MBS=$(med "$J" dd-write mb_per_s)
DISK_MSGS=$(awk -v m="$DD_MBS" 'BEGIN { if (m == "-") print "-"; else printf "%.0f", m * 1e6 / 1052 }')
{
  echo "Durable streams, medians of $RUNS runs, 1 KiB payload ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs," \
       "$SECONDS_PER_RUN s per throughput run, DIR $DIR on $FSTYPE)"
  echo
  echo "Disk: dd 1 GiB conv=fdatasync $DD_MBS MB/s = $DISK_MSGS records/s of 1,052 bytes;" \
       "fsync probe $(med "$J" probe records_per_s) records/s (fdatasync every 64: p50" \
       "$(med "$J" probe fdatasync_p50_us) µs, p99 $(med "$J" probe fdatasync_p99_us) µs;" \
       "one record per fdatasync: p50 $(med "$J" probe single_fdatasync_p50_us) µs)"
  echo
  echo "| cell | ours | against | ratio | goal |"
  echo "|---|---:|---:|---:|---|"
  for f in 1 10; do
    mem=$(med "$J" "mem-f$f" per_sub_msgs_per_s)
    base=$(minf "$mem" "$DISK_MSGS")
    for p in none periodic; do
      ours=$(med "$J" "$p-f$f" per_sub_msgs_per_s)
      row "fanout $f, durable \`$p\`, published msg/s (memory $mem) vs min(memory, disk)" \
        "$ours" "$base" "$(ratio "$ours" "$base")" ">=" 0.8
    done
  done
  ours=$(med "$J" commit-w64 msgs_per_s); base=$(med "$J" probe records_per_s)
  row "acked \`on_commit\`, 64 in flight, msg/s vs fsync probe records/s" "$ours" "$base" \
    "$(ratio "$ours" "$base")" ">=" 0.7
  ours=$(med "$J" commit-w64-pipeline msgs_per_s)
  row "the same with \`durable_flush_pipeline: true\` (fdatasync on a sync thread)" \
    "$ours" "$base" "$(ratio "$ours" "$base")" ">=" 0.7
  ours=$(med "$J" commit-acklat p50_us)
  base=$(sumf "$(med "$J" probe single_fdatasync_p50_us)" "$(med "$J" mem-acklat p50_us)")
  row "acked \`on_commit\`, one in flight, p50 µs vs probe single fdatasync p50 + memory acked p50 ($(med "$J" mem-acklat p50_us))" \
    "$ours" "$base" "$(ratio "$ours" "$base")" "<=" 1.5
  ours=$(med "$J" replay replay_msgs_per_s); base=$(med "$J" replay msgs_per_s)
  row "catch-up replay from disk (warm), msg/s vs live delivery in the same run (median of per-run ratios $(med "$J" replay replay_vs_live))" \
    "$ours" "$base" "$(ratio "$ours" "$base")" ">=" 0.8
  if [ "$VERIFY_MSGS" -gt 0 ]; then
    ours=$(med "$J" verify-warm gb_per_s)
    GIB=$(awk -v b="${BYTES:-0}" 'BEGIN { printf "%.2f", b / 1073741824 }')
    row "\`felix log verify\` $GIB GiB, page cache warm, GB/s vs 1 GB/s" "$ours" 1 \
      "$(ratio "$ours" 1)" ">=" 1
    ours=$(med "$J" verify-cold gb_per_s); base=$(med "$J" cat-cold gb_per_s)
    row "\`felix log verify\` $GIB GiB, cold ($COLD), GB/s vs cat of the same files, cold" \
      "$ours" "$base" "$(ratio "$ours" "$base")" ">=" 0.8
  fi
  if [ "$PEERS_RUN" = 1 ]; then
    for f in 1 10; do
      ours=$(med "$J" "periodic-f$f" msgs_per_s); base=$(med "$OUTDIR/js-f$f.jsonl" '*' msgs_per_s)
      row "fanout $f, \`periodic\`, deliveries/s vs JetStream TLS" "$ours" "$base" \
        "$(ratio "$ours" "$base")" ">=" 3
    done
    ours=$(med "$J" periodic-acklat p50_us); base=$(med "$OUTDIR/js-sync.jsonl" '*' ack_p50_us)
    row "acked one in flight p50 µs, \`periodic\` vs JetStream TLS --js-sync publish -> ack" \
      "$ours" "$base" "$(ratio "$ours" "$base")" "<=" 0.7
  fi
  echo
  echo "Also: on_commit 64 in flight ack p50 $(med "$J" commit-w64 p50_us) µs" \
       "($(med "$J" commit-w64-pipeline p50_us) µs with durable_flush_pipeline true); acked one in flight" \
       "p50/p99 µs: memory $(med "$J" mem-acklat p50_us)/$(med "$J" mem-acklat p99_us)," \
       "periodic $(med "$J" periodic-acklat p50_us)/$(med "$J" periodic-acklat p99_us)," \
       "on_commit $(med "$J" commit-acklat p50_us)/$(med "$J" commit-acklat p99_us)."
  echo "Foreign load (other_cpu_s, median per run): $(med "$J" '*' other_cpu_s) CPU s."
  echo "JSONL: $J $OUTDIR/js-*.jsonl"
} | tee "$OUTDIR/table.md"
