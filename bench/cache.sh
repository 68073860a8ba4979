#!/usr/bin/env bash
# cache.sh - the broker's key-value cache against Redis 7 with TLS (and plain, for context), cell by
# cell in one run, on this machine (issue 26, "Goals"). RUNS interleaved rounds; each round starts
# every server afresh: Felix-C, then Redis TLS, then Redis plain. The table shows medians of the
# valid runs and the ratios against Redis TLS.
#
# Felix-C: felix-broker (the Release build in BUILD) on 127.0.0.1 with bench/lib.sh's lossless
# profile, cache_max_bytes CACHE_MAX_BYTES and memory_limit_bytes MEMORY_LIMIT_BYTES, measured
# with felix-bench --mode cache: C closed-loop clients over --connections fx_clients (felix-bench's
# default: one per client, at most 8; CONNECTIONS overrides), each with P requests in flight, the
# next sent from the previous one's answer; keys "key:%012u" at random in [0, KEYS), filled first
# for the gets. Redis: redis-server from Debian, `--tls-port` (`--port 0`, a self-signed EC
# certificate made here, `--tls-auth-clients no`) or `--port`, `--save '' --appendonly no`, a
# temporary directory, measured with redis-benchmark -t get|set -d PAYLOAD -c C [-P P] -r KEYS
# --csv (`--tls --cacert` for TLS; the same 16-byte keys "key:%012d", filled first with redis-cli
# --pipe), -n sized from a short probe run (also its warm-up) to last about CACHE_S seconds.
# Cells (the issue's goals):
#   GET 50 clients, 1 in flight each       ops/s, Felix / Redis TLS (goal >= 1.5)
#   SET 50 clients                         ops/s (goal >= 1.5)
#   GET 1 client                           request -> answer p50 and p99 (goal <= 1.0)
#   pipelined GET, PIPE_CLIENTS clients x PIPELINE in flight: felix-bench --pipeline vs
#                                          redis-benchmark -P (goal >= 1.0). redis-benchmark's
#                                          latency with -P is per pipeline of P requests
#   memory per entry at FILL_KEYS entries of PAYLOAD bytes: Felix-C: felix-bench --op fill on a
#                                          broker of its own (VmRSS growth / entries; goal
#                                          <= 1.3 KiB); Redis TLS, for context: INFO memory
#                                          used_memory_rss growth / DBSIZE after a redis-cli --pipe
#                                          fill of as many distinct keys into a fresh server
#   pub/sub while 50 GET clients run       felix-bench --mode throughput --fanout 1 alone, then
#                                          again while a felix-bench --mode cache --op get
#                                          --clients 50 runs against the same broker: msg/s with
#                                          / alone (goal >= 0.8)
#
# usage: bench/cache.sh [--help]
#   e.g. RUNS=3 bench/cache.sh
#        RUNS=1 CACHE_S=2 FILL_KEYS=20000 REDIS_PLAIN=0 PUBSUB=0 bench/cache.sh   (a quick try)
# env:
#   RUNS               interleaved rounds (default 3; the table shows medians)
#   PAYLOAD            value bytes (default 1024)
#   CLIENTS            clients of the 50-client cells (default 50)
#   PIPELINE           requests in flight per client in the pipelined cell (default 16)
#   PIPE_CLIENTS       clients of the pipelined cell (default 50, redis-benchmark's -c default)
#   KEYS               key space of the get/set cells (default 10000)
#   CACHE_S            measured seconds per cell (default 10)
#   CONNECTIONS        felix-bench --connections (default: felix-bench's)
#   FILL_KEYS          entries of the memory cell (default 1000000; 0 skips the cell)
#   PUBSUB             1 (default): the pub/sub cell; 0 skips it
#   PUBSUB_S           its measured seconds (default 10; at least 5, felix-bench's run-length guard)
#   REDIS_TLS, REDIS_PLAIN  1 (default): run that Redis; 0 skips it
#   CACHE_MAX_BYTES    felix-broker cache_max_bytes (default 4294967296: the fill must fit one
#                      worker's share: cache_max_bytes / workers)
#   MEMORY_LIMIT_BYTES felix-broker memory_limit_bytes (default CACHE_MAX_BYTES + 2 GiB)
#   BUILD              build directory (default <repo>/build/bench, configured Release if missing)
#   OUTDIR             where JSONL, logs and the table go (default /tmp/felix-cache/<timestamp>)
#   FX_PORT, FX_ADMIN  the broker's ports on 127.0.0.1 (default 15900, 18900)
#   REDIS_TLS_PORT, REDIS_PORT  Redis's ports on 127.0.0.1 (default 16480, 16479)
#   QUIET_MAX_S        wait at most this long for a quiet host before each cell (default 10)
# needs: jq, openssl, redis-server and redis-tools (scripts/deps.sh --peers)
# Memory: the memory cell holds FILL_KEYS x PAYLOAD bytes in each server (about 1.2 GB with the
# defaults), one server at a time.
# Only the PIDs this script starts are signalled.
set -euo pipefail

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
  exit 0
fi
[ $# -eq 0 ] || { echo "cache: no arguments (settings are environment variables; see --help)" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
RUNS=${RUNS:-3}
PAYLOAD=${PAYLOAD:-1024}
CLIENTS=${CLIENTS:-50}
PIPELINE=${PIPELINE:-16}
PIPE_CLIENTS=${PIPE_CLIENTS:-50}
KEYS=${KEYS:-10000}
CACHE_S=${CACHE_S:-10}
CONNECTIONS=${CONNECTIONS:-}
FILL_KEYS=${FILL_KEYS:-1000000}
PUBSUB=${PUBSUB:-1}
PUBSUB_S=${PUBSUB_S:-10}
REDIS_TLS=${REDIS_TLS:-1}
REDIS_PLAIN=${REDIS_PLAIN:-1}
CACHE_MAX_BYTES=${CACHE_MAX_BYTES:-4294967296}
MEMORY_LIMIT_BYTES=${MEMORY_LIMIT_BYTES:-$((CACHE_MAX_BYTES + 2147483648))}
TS=$(date +%Y%m%dT%H%M%S)
OUTDIR=${OUTDIR:-/tmp/felix-cache/$TS}
FX_PORT=${FX_PORT:-15900}
FX_ADMIN=${FX_ADMIN:-18900}
REDIS_TLS_PORT=${REDIS_TLS_PORT:-16480}
REDIS_PORT=${REDIS_PORT:-16479}
export QUIET_MAX_S=${QUIET_MAX_S:-10}

die() { echo "cache: $*" >&2; exit 1; }
for v in RUNS PAYLOAD CLIENTS PIPELINE PIPE_CLIENTS KEYS CACHE_S PUBSUB_S CACHE_MAX_BYTES MEMORY_LIMIT_BYTES; do
  [[ ${!v} =~ ^[0-9]+$ ]] && [ "${!v}" -ge 1 ] || die "$v must be a whole number >= 1 (got '${!v}')"
done
[ "$PUBSUB_S" -ge 5 ] || die "PUBSUB_S must be at least 5 (felix-bench refuses shorter throughput runs)"
[[ $FILL_KEYS =~ ^[0-9]+$ ]] || die "FILL_KEYS must be a whole number (got '$FILL_KEYS')"
[ -z "$CONNECTIONS" ] || [[ $CONNECTIONS =~ ^[0-9]+$ ]] || die "CONNECTIONS must be a whole number"
[ "$KEYS" -le 999999999999 ] && [ "$FILL_KEYS" -le 999999999999 ] || die "at most 12-digit keys"
command -v jq >/dev/null || die "needs jq"
if [ "$REDIS_TLS" = 1 ] || [ "$REDIS_PLAIN" = 1 ]; then
  for p in redis-server redis-benchmark redis-cli; do
    command -v "$p" >/dev/null || die "needs $p (apt-get install redis-server redis-tools; scripts/deps.sh --peers)"
  done
fi
[ "$REDIS_TLS" = 1 ] && { command -v openssl >/dev/null || die "needs openssl"; }

mkdir -p "$OUTDIR"
export FX_TAG=cache  # bench/lib.sh's messages
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
"$BUILD/felix-broker" --print-config 2>/dev/null | grep -q cache_max_bytes ||
  die "$BUILD/felix-broker has no cache (no cache_max_bytes key): rebuild it"

J=$OUTDIR/felix.jsonl   # felix-bench's lines
R=$OUTDIR/redis.jsonl   # one line per redis-benchmark cell and memory fill, same field names
touch "$J" "$R"
log() { echo "# $(date -u +%T) $*" >&2; }

# ---- Redis: started with a temporary directory on a loopback port, stopped by its PID ----------
RD="" RPID="" LOAD_PID=""
redis_stop() {
  if [ -n "$RPID" ]; then
    kill -TERM "$RPID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$RPID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$RPID" 2>/dev/null || true
    wait "$RPID" 2>/dev/null || true
    RPID=""
  fi
  [ -z "$RD" ] || rm -rf -- "$RD"
  RD=""
}
cleanup() {
  [ -z "$LOAD_PID" ] || { kill "$LOAD_PID" 2>/dev/null || true; wait "$LOAD_PID" 2>/dev/null || true; }
  fx_stop_broker
  redis_stop
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

TLSD=$OUTDIR/tls
gen_tls() {  # a self-signed EC certificate for 127.0.0.1 / localhost, as ../shared/peers does
  [ -s "$TLSD/cert.pem" ] && return 0
  (umask 077 && mkdir -p "$TLSD")
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$TLSD/key.pem" -out "$TLSD/cert.pem" 2>/dev/null || die "openssl could not make a certificate"
}

RCONN=()  # redis-benchmark / redis-cli connection arguments of the running server
redis_start() {  # tls|plain LOG
  local kind=$1 log=$2 port args
  RD=$(mktemp -d /tmp/felix-cache-redis.XXXXXX)
  if [ "$kind" = tls ]; then
    gen_tls
    port=$REDIS_TLS_PORT
    args=(--port 0 --tls-port "$port" --tls-cert-file "$TLSD/cert.pem" --tls-key-file "$TLSD/key.pem"
          --tls-auth-clients no)
    RCONN=(-h 127.0.0.1 -p "$port" --tls --cacert "$TLSD/cert.pem")
  else
    port=$REDIS_PORT
    args=(--port "$port")
    RCONN=(-h 127.0.0.1 -p "$port")
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port is already in use"; fi
  redis-server --bind 127.0.0.1 "${args[@]}" --save '' --appendonly no --daemonize no \
    --protected-mode yes --dir "$RD" >"$log" 2>&1 &
  RPID=$!
  for _ in $(seq 1 100); do
    redis-cli "${RCONN[@]}" ping 2>/dev/null | grep -q PONG && return 0
    kill -0 "$RPID" 2>/dev/null || break
    sleep 0.1
  done
  echo "cache: redis-server ($kind) did not start; log ($log):" >&2; cat "$log" >&2; exit 1
}

# Puts keys "key:%012d" 0..N-1 with PAYLOAD-byte values, each once, through redis-cli --pipe.
redis_fill() {  # N
  awk -v n="$1" -v p="$PAYLOAD" 'BEGIN {
      v = sprintf("%*s", p, ""); gsub(/ /, "x", v)
      for (i = 0; i < n; i++) printf "*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$%d\r\n%s\r\n", i, p, v
    }' | redis-cli "${RCONN[@]}" --pipe >>"$OUTDIR/redis-fill.log" 2>&1 || die "redis-cli --pipe failed (see $OUTDIR/redis-fill.log)"
}

redis_info() {  # FIELD -> value from INFO memory
  redis-cli "${RCONN[@]}" info memory | tr -d '\r' | sed -n "s/^$1://p"
}

# Runs redis-benchmark --csv ARGS... and prints rps p50_ms p99_ms of its one test.
rb() {
  redis-benchmark "${RCONN[@]}" --csv "$@" 2>>"$OUTDIR/redis-benchmark.log" |
    awk -F, 'NR == 2 { for (i = 1; i <= NF; i++) gsub(/"/, "", $i); print $2, $5, $7 }'
}

# redis CELL LABEL BACKEND TEST CLIENTS PIPELINE: a probe of about a second's worth (also the
# warm-up), then -n sized to last CACHE_S seconds; one JSON line into R.
redis_cell() {
  local label=$1 backend=$2 test=$3 c=$4 p=$5 probe n rps p50 p99 t0 t1
  fx_wait_quiet
  log "$backend $label"
  probe=$(( c * p * 200 )); [ "$probe" -ge 20000 ] || probe=20000; [ "$probe" -le 200000 ] || probe=200000
  read -r rps _ _ < <(rb -t "$test" -d "$PAYLOAD" -c "$c" -P "$p" -r "$KEYS" -n "$probe") || true
  n=$(awk -v r="${rps:-0}" -v s="$CACHE_S" 'BEGIN { n = int(r * s); if (n < 10000) n = 10000; print n }')
  t0=$(date +%s.%N)
  read -r rps p50 p99 < <(rb -t "$test" -d "$PAYLOAD" -c "$c" -P "$p" -r "$KEYS" -n "$n") || true
  t1=$(date +%s.%N)
  jq -nc --arg l "$label" --arg b "$backend" --arg t "$test" --argjson c "$c" --argjson p "$p" \
    --argjson n "$n" --arg rps "${rps:-}" --arg p50 "${p50:-}" --arg p99 "${p99:-}" \
    --argjson keys "$KEYS" --argjson payload "$PAYLOAD" --arg t0 "$t0" --arg t1 "$t1" '
    { tool: "redis-benchmark", label: $l, backend: $b, op: ($t | ascii_downcase), clients: $c,
      pipeline: $p, requests: $n, keys: $keys, payload: $payload,
      run_s: (($t1 | tonumber) - ($t0 | tonumber)),
      valid: ($rps != ""),
      ops_per_s: (if $rps == "" then null else ($rps | tonumber) end),
      p50_us: (if $p50 == "" then null else ($p50 | tonumber) * 1000 end),
      p99_us: (if $p99 == "" then null else ($p99 | tonumber) * 1000 end) }' >>"$R"
}

# The memory cell on a fresh server: used_memory_rss growth over FILL_KEYS distinct keys.
redis_memory() {  # BACKEND
  local rss0 rss1 used0 used1 dbsize t0 t1
  log "$1 memory/fill: $FILL_KEYS keys"
  rss0=$(redis_info used_memory_rss); used0=$(redis_info used_memory)
  t0=$(date +%s.%N)
  redis_fill "$FILL_KEYS"
  t1=$(date +%s.%N)
  rss1=$(redis_info used_memory_rss); used1=$(redis_info used_memory)
  dbsize=$(redis-cli "${RCONN[@]}" dbsize | tr -d '\r')
  jq -nc --arg b "$1" --argjson r0 "$rss0" --argjson r1 "$rss1" --argjson u0 "$used0" \
    --argjson u1 "$used1" --argjson n "$dbsize" --argjson want "$FILL_KEYS" --arg t0 "$t0" --arg t1 "$t1" '
    { tool: "redis-cli", label: "memory/fill", backend: $b, keys: $want, cache_entries: $n,
      valid: ($n == $want), fill_s: (($t1 | tonumber) - ($t0 | tonumber)),
      rss_before_kb: ($r0 / 1024 | floor), rss_after_kb: ($r1 / 1024 | floor),
      rss_per_entry_bytes: (if $n > 0 then ($r1 - $r0) / $n else null end),
      used_memory_per_entry_bytes: (if $n > 0 then ($u1 - $u0) / $n else null end) }' >>"$R"
}

redis_round() {  # tls|plain ROUND
  local kind=$1 b="redis-$1"
  redis_start "$kind" "$OUTDIR/redis-$kind-$2.log"
  redis_fill "$KEYS"
  redis_cell get/c$CLIENTS "$b" get "$CLIENTS" 1
  redis_cell set/c$CLIENTS "$b" set "$CLIENTS" 1
  redis_cell get/c1 "$b" get 1 1
  redis_cell get/c$PIPE_CLIENTS-p$PIPELINE "$b" get "$PIPE_CLIENTS" "$PIPELINE"
  redis_stop
  if [ "$kind" = tls ] && [ "$FILL_KEYS" -gt 0 ]; then
    redis_start "$kind" "$OUTDIR/redis-$kind-memory-$2.log"
    redis_memory "$b"
    redis_stop
  fi
}

# ---- Felix-C ---------------------------------------------------------------------------------
CACHE_SETS=(--set cache_max_bytes="$CACHE_MAX_BYTES" --set memory_limit_bytes="$MEMORY_LIMIT_BYTES")
CONN_ARGS=(); [ -z "$CONNECTIONS" ] || CONN_ARGS=(--connections "$CONNECTIONS")

felix() {  # LABEL felix-bench args...
  local label=$1; shift
  fx_wait_quiet
  log "felix $label"
  fx_bench --payload "$PAYLOAD" --runs 1 --label "$label" "$@" >>"$J" 2>>"$OUTDIR/felix-bench.log" ||
    echo "# felix $label: the run failed or was invalid (see $OUTDIR/felix-bench.log)" >&2
}
fcache() {  # LABEL CLIENTS PIPELINE OP
  felix "$1" --mode cache --op "$4" --clients "$2" --pipeline "$3" --keys "$KEYS" \
    --min-seconds "$CACHE_S" "${CONN_ARGS[@]}"
}

felix_round() {  # ROUND
  fx_start_broker "$OUTDIR/broker-$1.log" "$OUTDIR/state" "${CACHE_SETS[@]}"
  fcache get/c$CLIENTS "$CLIENTS" 1 get
  fcache set/c$CLIENTS "$CLIENTS" 1 set
  fcache get/c1 1 1 get
  fcache get/c$PIPE_CLIENTS-p$PIPELINE "$PIPE_CLIENTS" "$PIPELINE" get
  if [ "$PUBSUB" = 1 ]; then
    felix pubsub/alone --mode throughput --fanout 1 --min-seconds "$PUBSUB_S"
    # The same while 50 GET clients run against the broker: started first (its fill and
    # warm-up take a moment), lasting past the pub/sub run, then awaited.
    local load_s=$((PUBSUB_S + 20))
    (exec "$BUILD/felix-bench" --server "127.0.0.1:$FX_PORT" --pin "$FP" --json --quiet \
      --payload "$PAYLOAD" --runs 1 --label pubsub/load --mode cache --op get --clients "$CLIENTS" \
      --keys "$KEYS" --min-seconds "$load_s" --max-seconds "$((load_s + 30))" "${CONN_ARGS[@]}" \
      >>"$OUTDIR/load.jsonl" 2>>"$OUTDIR/load.log") &
    LOAD_PID=$!
    sleep 3
    QUIET_MAX_S=0 felix pubsub/with-get$CLIENTS --mode throughput --fanout 1 --min-seconds "$PUBSUB_S"
    wait "$LOAD_PID" 2>/dev/null || echo "# the GET load failed or was invalid (see $OUTDIR/load.log)" >&2
    LOAD_PID=""
  fi
  fx_stop_broker
  if [ "$FILL_KEYS" -gt 0 ]; then  # a broker of its own: RSS growth of new entries only
    fx_start_broker "$OUTDIR/broker-memory-$1.log" "$OUTDIR/state" "${CACHE_SETS[@]}"
    felix memory/fill --mode cache --op fill --keys "$FILL_KEYS" --clients 64 "${CONN_ARGS[@]}"
    fx_stop_broker
  fi
}

for round in $(seq 1 "$RUNS"); do
  log "round $round of $RUNS"
  felix_round "$round"
  [ "$REDIS_TLS" = 1 ] && redis_round tls "$round"
  [ "$REDIS_PLAIN" = 1 ] && redis_round plain "$round"
done

# ---- the table ---------------------------------------------------------------------------------
med() {  # FILE LABEL FIELD [BACKEND] -> median over valid runs, or "-"
  jq -rs --arg l "$2" --arg f "$3" --arg b "${4:-}" '
    [ .[] | select(.label == $l and .valid == true and ($b == "" or .backend == $b))
      | .[$f] | select(. != null) ] | sort
    | if length == 0 then "-" else .[(length - 1) / 2 | floor] end' "$1"
}
valid() {  # FILE LABEL [BACKEND] -> "valid/runs"
  jq -rs --arg l "$2" --arg b "${3:-}" '[ .[] | select(.label == $l and ($b == "" or .backend == $b)) ]
    | "\([ .[] | select(.valid == true) ] | length)/\(length)"' "$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
num() { awk -v a="$1" -v p="${2:-0}" 'BEGIN { if (a == "-") print "-"; else printf "%.*f", p, a }'; }
row() {  # TEXT LABEL FIELD GOAL [PRECISION]
  local a b c
  a=$(med "$J" "$2" "$3"); b=$(med "$R" "$2" "$3" redis-tls); c=$(med "$R" "$2" "$3" redis-plain)
  echo "| $1 | $(num "$a" "${5:-0}") | $(num "$b" "${5:-0}") | $(num "$c" "${5:-0}") | $(ratio "$a" "$b") | $4 |"
}

{
  echo "Cache: Felix-C vs Redis $(redis-server --version 2>/dev/null | sed -n 's/.*v=\([0-9.]*\).*/\1/p') TLS (and plain), medians of valid runs ($RUNS interleaved rounds),"
  echo "values of $PAYLOAD B, keys at random in [0, $KEYS), about $CACHE_S s per cell"
  echo "($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs; Felix-C connections: $(jq -rs '[ .[] | select(.mode == "cache" and .op != "fill") | .connections ] | unique | map(tostring) | join(", ")' "$J"))"
  echo
  echo "| cell | Felix-C | Redis TLS | Redis plain | Felix / Redis TLS | goal |"
  echo "|---|---:|---:|---:|---:|---|"
  row "GET ops/s, $CLIENTS clients, 1 in flight each" "get/c$CLIENTS" ops_per_s ">= 1.5"
  row "SET ops/s, $CLIENTS clients" "set/c$CLIENTS" ops_per_s ">= 1.5"
  row "GET p50 us, 1 client" get/c1 p50_us "<= 1.0" 1
  row "GET p99 us, 1 client" get/c1 p99_us "<= 1.0" 1
  row "pipelined GET ops/s, $PIPE_CLIENTS clients x $PIPELINE in flight (Redis -P $PIPELINE)" \
    "get/c$PIPE_CLIENTS-p$PIPELINE" ops_per_s ">= 1.0"
  row "GET p50 us, $CLIENTS clients (context)" "get/c$CLIENTS" p50_us "" 1
  row "GET p99 us, $CLIENTS clients (context)" "get/c$CLIENTS" p99_us "" 1
  row "SET p99 us, $CLIENTS clients (context)" "set/c$CLIENTS" p99_us "" 1
  if [ "$FILL_KEYS" -gt 0 ]; then
    a=$(med "$J" memory/fill rss_per_entry_bytes); b=$(med "$R" memory/fill rss_per_entry_bytes redis-tls)
    echo "| memory per entry at $FILL_KEYS entries of $PAYLOAD B, RSS growth / entries, bytes | $(num "$a") | $(num "$b") | | $(ratio "$a" "$b") | <= 1.3 KiB (1331 B) |"
  fi
  echo
  cells=("get/c$CLIENTS" "set/c$CLIENTS" get/c1 "get/c$PIPE_CLIENTS-p$PIPELINE")
  [ "$FILL_KEYS" -eq 0 ] || cells+=(memory/fill)
  for l in "${cells[@]}"; do
    echo "valid runs $l: Felix-C $(valid "$J" "$l"), Redis TLS $(valid "$R" "$l" redis-tls), Redis plain $(valid "$R" "$l" redis-plain)"
  done
  if [ "$PUBSUB" = 1 ]; then
    a=$(med "$J" "pubsub/with-get$CLIENTS" msgs_per_s); b=$(med "$J" pubsub/alone msgs_per_s)
    echo
    echo "| Felix-C against itself | with the GET load | alone | ratio | goal |"
    echo "|---|---:|---:|---:|---|"
    echo "| pub/sub msg/s (throughput, fanout 1) while $CLIENTS GET clients run, vs alone | $(num "$a") | $(num "$b") | $(ratio "$a" "$b") | >= 0.8 |"
    echo
    echo "GET load during those runs (ops/s, median): $(med "$OUTDIR/load.jsonl" pubsub/load ops_per_s);" \
         "valid runs: with $(valid "$J" "pubsub/with-get$CLIENTS"), alone $(valid "$J" pubsub/alone), load $(valid "$OUTDIR/load.jsonl" pubsub/load)"
  fi
  echo
  echo "Foreign load (other_cpu_s, median): Felix-C GET $CLIENTS clients $(med "$J" "get/c$CLIENTS" other_cpu_s)"
  echo "Redis latency with -P is per pipeline of $PIPELINE requests; Felix-C's per request."
  echo
  echo "JSONL: $J $R; logs in $OUTDIR"
} | tee "$OUTDIR/table.md"
