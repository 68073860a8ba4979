#!/usr/bin/env bash
# soak.sh - a long mixed run against felix-broker (Release), restarted between segments.
#
# The run is a series of segments, each on a fresh broker, alternating the lossless
# profile (block at checkpoints 5 and 6, pub_ingress_wait) and the shipped shedding
# defaults. A segment is --segment-cycles cycles; one cycle is:
#   stalled      a `felix sub` that is stopped (SIGSTOP: its receive window freezes) while
#                `felix pub --ack per_message` sends it 1000 messages of 16 KiB; lossless,
#                alongside the publishers (the broker must close it after
#                subscriber_block_timeout_ms, counted), shedding, after them
#   publishers   lossless: felix-bench --mode throughput (2 subscribers, 2 streams; it
#                fails on any lost, duplicated or malformed delivery); shedding: felix-bench
#                --mode overload (3 subscribers, one stalled). Its loss check compares, for
#                EVERY subscriber of the run (the healthy ones shed too when the publisher
#                outruns them), messages published - distinct messages received with the
#                sum of the counters that cover exactly that subscriber: its client queue's
#                drops (fx_sub_stats.dropped), the broker's drops on its own subscriptions
#                (GET /v1/subscriptions queue_dropped + lane_dropped, read once the broker
#                holds nothing more for them) and the broker's ingress drops during the run
#                in messages (felix_broker_ingress_dropped_messages_total; every subscriber
#                misses those; nothing else publishes meanwhile). Process-wide counters are
#                not compared: they include other subscribers' drops, and the ingress
#                publish counter counts frames, which carry many messages each
#   sub churn    felix-bench --mode idle-subs --subs N (N subscriptions made and closed)
#   conn churn   C one-shot `felix pub` connections to C auto-created streams of 5 tenants
#   quiescence   nothing runs until every gauge of /metrics reads 0 (streams expire after
#                stream_idle_expiry_s, so felix_stream_retained_bytes returns to 0 too), at
#                most 90 s; then, once the broker's idle trim has seen the idle period
#                (allocator_idle_trim_ms: freed heap goes back to the kernel), its VmRSS
#                is sampled
# Pass: every felix-bench run valid (overload: or invalid only by healthy losses, which
# are accounted); every subscriber's shedding losses equal its counters; every gauge back
# to 0 after each cycle; per segment, every RSS sample after the first (warm-up) cycle within
# 5 % of the second cycle's. Every check is one JSON line in OUTDIR/results.jsonl; the last
# line of output says PASS or FAIL (exit status 0 or 1). Not part of `make test`.
#
# usage: bench/soak.sh [--minutes N] [--segment-cycles K] [--subs N] [--conns C]
#                      [--first lossless|shedding]   (defaults 30, 4, 2000, 20, lossless)
# A cycle starts only while time is left, so the run may end up to one cycle (about 45 s)
# after N minutes.
# env: BUILD (default <repo>/build/bench), OUTDIR (default /tmp/felix-soak), FX_PORT, FX_ADMIN,
#      BROKER_ARGS (extra felix-broker arguments), SOAK_DIAG=1 (each quiescence line also
#      says what the RSS is made of: [heap], other anonymous and file mappings, and
#      glibc's heap in use, read with gdb; a sample 5 % above the segment's reference keeps
#      logs/smaps-S-C.txt and logs/metrics-S-C.txt, follows RSS for 10 s, then calls
#      malloc_trim(0) in the broker through gdb and records the RSS after it).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
OUTDIR=${OUTDIR:-/tmp/felix-soak}
FX_PORT=${FX_PORT:-15781}
FX_ADMIN=${FX_ADMIN:-18781}
FX_TAG=soak
MINUTES=30 SEG_CYCLES=4 SUBS=2000 CONNS=20 FIRST=0
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) MINUTES=${2:?}; shift 2 ;;
    --segment-cycles) SEG_CYCLES=${2:?}; shift 2 ;;
    --subs) SUBS=${2:?}; shift 2 ;;
    --conns) CONNS=${2:?}; shift 2 ;;
    --first)
      case ${2:?} in lossless) FIRST=0 ;; shedding) FIRST=1 ;;
        *) echo "soak: --first lossless|shedding" >&2; exit 2 ;; esac
      shift 2 ;;
    -h|--help) sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) echo "soak: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$SEG_CYCLES" -ge 3 ] || { echo "soak: --segment-cycles must be at least 3" >&2; exit 2; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
if [ ! -x "$BUILD/felix" ]; then
  cmake --build "$BUILD" --target felix -j2 >/dev/null
fi
mkdir -p "$OUTDIR/logs"
RESULTS=$OUTDIR/results.jsonl
: >"$RESULTS"
FAILS=0
STALL_PIDS=()

# The broker settings every segment uses: streams expire quickly so that the rings empty
# at quiescence, and a stalled lossless subscriber is closed after 2 s.
SOAK_ARGS=(--set stream_idle_expiry_s=10 --set subscriber_block_timeout_ms=2000)

cleanup() {
  local p
  for p in "${STALL_PIDS[@]}"; do
    kill -CONT "$p" 2>/dev/null || true
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  STALL_PIDS=()
  fx_stop_broker
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

record() {  # JSON object (one line)
  echo "$1" >>"$RESULTS"
}

fail() {  # message
  FAILS=$((FAILS + 1))
  echo "soak: FAIL: $1" >&2
}

cli() {  # felix subcommand args...
  local cmd=$1; shift
  "$BUILD/felix" "$cmd" --server "127.0.0.1:$FX_PORT" --pin "$FP" "$@"
}

scrape() {  # metric name -> value (sum over labels), 0 if absent
  curl -sf "http://127.0.0.1:$FX_ADMIN/metrics" |
    awk -v m="$1" '!/^#/{n=$1; sub(/\{.*/,"",n); if (n==m) s+=$2} END{printf "%.0f\n", s}'
}

nonzero_gauges() {  # prints "name value" for every gauge sample that is not 0
  curl -sf "http://127.0.0.1:$FX_ADMIN/metrics" |
    awk '/^# TYPE .* gauge$/{g[$3]=1; next} /^#/{next}
         {n=$1; sub(/\{.*/,"",n); if ((n in g) && $2+0 != 0) print $1, $2}'
}

rss_kb() {
  awk '/^VmRSS/{print $2}' "/proc/$BROKER_PID/status"
}

# SOAK_DIAG=1: what an RSS sample is made of, as extra JSON fields: the resident kB of
# the main heap ([heap]), of the other anonymous mappings (thread arenas, stacks,
# ngtcp2 and GnuTLS buffers), of file mappings, and glibc's own count of heap bytes in
# use and held (malloc_stats, read through gdb: the broker stops for about a second).
diag_json() {
  [ "${SOAK_DIAG:-0}" = 1 ] || return 0
  local smaps ms
  smaps=$(awk '/^[0-9a-f]+-[0-9a-f]+ /{kind = ($6 == "[heap]") ? "heap" : ($6 == "" ? "anon" : "file")}
               /^Rss:/{r[kind] += $2}
               END{printf ",\"heap_kb\":%d,\"anon_kb\":%d,\"file_kb\":%d", r["heap"], r["anon"], r["file"]}' \
             "/proc/$BROKER_PID/smaps")
  # malloc_stats prints on the broker's stderr, its log.
  local log=$OUTDIR/logs/broker-$seg.log off
  off=$(stat -c %s "$log")
  gdb -q -batch -p "$BROKER_PID" -ex 'call (void)malloc_stats()' >/dev/null 2>&1 || true
  sleep 0.2
  ms=$(tail -c +"$((off + 1))" "$log" |
       awk '/^Total \(incl. mmap\):/{t=1} t && /system bytes/{sys=$4} t && /in use bytes/{use=$5}
            /^Arena [0-9]+:/{a++}
            END{if (!t) {printf ",\"malloc_system_kb\":null,\"malloc_in_use_kb\":null,\"arenas\":null"; exit}
                printf ",\"malloc_system_kb\":%d,\"malloc_in_use_kb\":%d,\"arenas\":%d", sys/1024, use/1024, a}')
  case $ms in *null*) echo "soak: SOAK_DIAG: gdb could not read the broker's heap (malloc_stats)" >&2 ;; esac
  # Above 5% of the segment's reference (its second sample, as the RSS check): keep
  # the whole picture, and follow RSS for 10 s to see whether it comes back by itself.
  local series="" i ext=""
  if [ "${#rss[@]}" -ge 2 ] && [ $(( (RSS - rss[1]) * 100 / rss[1] )) -ge 5 ]; then
    cp "/proc/$BROKER_PID/smaps" "$OUTDIR/logs/smaps-$seg-$cycle.txt" 2>/dev/null || true
    curl -sf "http://127.0.0.1:$FX_ADMIN/metrics" >"$OUTDIR/logs/metrics-$seg-$cycle.txt" || true
    for i in $(seq 1 10); do
      sleep 1
      series+="${series:+,}$(rss_kb)"
    done
    # What a malloc_trim(0) from outside gives back now (the broker's own trims ran).
    gdb -q -batch -p "$BROKER_PID" -ex 'call (int)malloc_trim(0)' >/dev/null 2>&1 || true
    ext=",\"rss_after_external_trim_kb\":$(rss_kb)"
  fi
  printf '%s%s,"rss_after_kb":[%s]%s' "$smaps" "$ms" "$series" "${ext:-}"
}

bench_json() {  # label args... : runs felix-bench, prints its JSON line (or nothing)
  local label=$1; shift
  fx_bench --label "$label" "$@" 2>>"$OUTDIR/logs/bench.log" | tail -n 1 || true
}

# ---- the parts of a cycle ------------------------------------------------------------------

stalled_start() {  # seg cycle
  local stream="t1/default/stalled-$1-$2"
  # Started directly, not through cli(): $! must be felix's own pid.
  "$BUILD/felix" sub --server "127.0.0.1:$FX_PORT" --pin "$FP" "$stream" \
    >/dev/null 2>>"$OUTDIR/logs/stalled.log" &
  local pid=$!
  STALL_PIDS+=("$pid")
  sleep 1
  kill -STOP "$pid" 2>/dev/null || true
  # Acked publishes: lossless, they wait behind the stalled subscriber until the broker
  # closes it; shedding, they are answered at once and the subscriber's queue sheds.
  # 1000 messages: more than the subscriber queue (512 batches) holds, so the lossless
  # fanout parks on it.
  "$BUILD/felix" pub --server "127.0.0.1:$FX_PORT" --pin "$FP" --ack per_message \
    --count 1000 --size 16K "$stream" >/dev/null 2>>"$OUTDIR/logs/stalled.log" &
  STALL_PIDS+=("$!")
}

stalled_end() {
  local p
  for p in "${STALL_PIDS[@]}"; do
    kill -CONT "$p" 2>/dev/null || true
    kill -TERM "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  STALL_PIDS=()
}

publishers_lossless() {  # seg cycle
  local j
  j=$(bench_json "tput-$1-$2" --mode throughput --fanout 2 --streams 2 --total 200000 \
      --max-seconds 20)
  if [ -z "$j" ]; then fail "segment $1 cycle $2: felix-bench throughput printed nothing"; return; fi
  record "$j"
  [ "$(jq -r .valid <<<"$j")" = true ] ||
    fail "segment $1 cycle $2: lossless throughput run invalid: $(jq -r '.invalid_reason // "?"' <<<"$j")"
}

publishers_shedding() {  # seg cycle
  local j lost counted exact
  j=$(bench_json "overload-$1-$2" --mode overload --fanout 3 --min-seconds 5 --max-seconds 15)
  if [ -z "$j" ]; then fail "segment $1 cycle $2: felix-bench overload printed nothing"; return; fi
  record "$j"
  # Valid, or invalid only because the healthy subscribers were shed too (the publisher
  # may outrun them on a loaded host; the shedding profile allows it): their losses are
  # accounted below like the stalled one's.
  jq -e '.valid == true or (.lost > 0 and .dups == 0 and .errors == 0
                            and (.invalid_reason // "" | test("^lost [0-9]+ of [0-9]+ deliveries$")))' \
    <<<"$j" >/dev/null ||
    fail "segment $1 cycle $2: overload run invalid: $(jq -r '.invalid_reason // "?"' <<<"$j")"
  # Every subscriber's losses against the counters that cover exactly them (felix-bench's
  # loss_subs): its client queue, the broker's drops on its own subscriptions
  # (/v1/subscriptions queue_dropped + lane_dropped) and the ingress drops in messages.
  lost=$(jq -r '.loss_missed // "null"' <<<"$j")
  counted=$(jq -r '.loss_counted // "null"' <<<"$j")
  exact=$(jq -r '(.loss_accounted == true and .loss_exact == true)' <<<"$j")
  record "{\"check\":\"shedding_losses_counted\",\"segment\":$1,\"cycle\":$2,\"lost\":$lost,\"counted\":$counted,\"per_subscriber\":$(jq -c '.loss_subs // null' <<<"$j"),\"ok\":$exact}"
  [ "$exact" = true ] ||
    fail "segment $1 cycle $2: subscribers lost $lost messages, counters say $counted ($(jq -r '.loss_why // "per subscriber: " + (.loss_subs | map("\(.missed)/\(.counted)") | join(" "))' <<<"$j"))"
}

sub_churn() {  # seg cycle
  local j
  j=$(bench_json "subs-$1-$2" --mode idle-subs --subs "$SUBS")
  if [ -z "$j" ]; then fail "segment $1 cycle $2: felix-bench idle-subs printed nothing"; return; fi
  record "$j"
  [ "$(jq -r .valid <<<"$j")" = true ] || fail "segment $1 cycle $2: idle-subs run invalid"
}

conn_churn() {  # seg cycle
  local i bad=0
  for i in $(seq 1 "$CONNS"); do
    cli pub --ack per_message "t$((i % 5))/default/churn-$1-$2-$i" "m$i" \
      >/dev/null 2>>"$OUTDIR/logs/churn.log" || bad=$((bad + 1))
  done
  record "{\"check\":\"conn_churn\",\"segment\":$1,\"cycle\":$2,\"connections\":$CONNS,\"failed\":$bad,\"ok\":$([ "$bad" = 0 ] && echo true || echo false)}"
  [ "$bad" = 0 ] || fail "segment $1 cycle $2: $bad of $CONNS one-shot publishes failed"
}

quiesce() {  # seg cycle; sets RSS (kB) after the gauges settled and the idle trim ran
  local t0=$SECONDS left="" idle0
  idle0=$(scrape felix_broker_allocator_idle_periods_total)
  while [ $((SECONDS - t0)) -lt 90 ]; do
    left=$(nonzero_gauges)
    [ -z "$left" ] && break
    sleep 1
  done
  local ok=true
  if [ -n "$left" ]; then
    ok=false
    fail "segment $1 cycle $2: gauges not back to 0 after 90 s: $(tr '\n' ' ' <<<"$left")"
  fi
  local kicked
  kicked=$(scrape felix_subscriber_block_timeouts_total)
  if [ "$profile" = lossless ] && [ "$kicked" -le "$KICKED" ]; then
    fail "segment $1 cycle $2: the stalled lossless subscriber was not closed (block timeouts $kicked)"
  fi
  KICKED=$kicked
  # The broker returns freed heap to the kernel once no datagram has moved for
  # allocator_idle_trim_ms (2 s), and again within a 250 ms tick whenever more is
  # freed while idle (the streams expiring): wait for this idle period to be seen,
  # then for a few ticks.
  local t1=$SECONDS
  while [ "$(scrape felix_broker_allocator_idle_periods_total)" -le "$idle0" ] &&
    [ $((SECONDS - t1)) -lt 30 ]; do
    sleep 0.5
  done
  sleep 1
  RSS=$(rss_kb)
  record "{\"check\":\"quiescence\",\"segment\":$1,\"cycle\":$2,\"wait_s\":$((SECONDS - t0)),\"gauges_zero\":$ok,\"rss_kb\":$RSS,\"idle_periods\":$(scrape felix_broker_allocator_idle_periods_total),\"trims\":$(scrape felix_broker_allocator_trims_total),\"trimmed_kb\":$(( $(scrape felix_broker_allocator_trimmed_bytes_total) / 1024 )),\"block_timeouts\":$(scrape felix_subscriber_block_timeouts_total),\"streams_expired\":$(scrape felix_registry_streams_expired_total)$(diag_json)}"
}

# ---- segments -------------------------------------------------------------------------------

END=$((SECONDS + MINUTES * 60))
seg=0
while [ "$SECONDS" -lt "$END" ]; do
  seg=$((seg + 1))
  if [ $(((seg + FIRST) % 2)) = 1 ]; then FX_LOSSLESS=1 profile=lossless
  else FX_LOSSLESS=0 profile=shedding; fi
  echo "soak: segment $seg ($profile), $(( (END - SECONDS) / 60 )) min left" >&2
  # shellcheck disable=SC2086
  fx_start_broker "$OUTDIR/logs/broker-$seg.log" "$OUTDIR/state" "${SOAK_ARGS[@]}" ${BROKER_ARGS:-}
  rss=() KICKED=0
  for cycle in $(seq 1 "$SEG_CYCLES"); do
    [ "$SECONDS" -lt "$END" ] || break
    if [ "$profile" = lossless ]; then
      # Concurrently: the stalled subscriber parks the worker the bench's streams share
      # until subscriber_block_timeout_ms closes it.
      stalled_start "$seg" "$cycle"
      publishers_lossless "$seg" "$cycle"
    else
      # One after the other: the ingress drops the overload run counts are broker-wide
      # (its other counters are per subscription).
      publishers_shedding "$seg" "$cycle"
      stalled_start "$seg" "$cycle"
    fi
    sub_churn "$seg" "$cycle"
    conn_churn "$seg" "$cycle"
    stalled_end
    quiesce "$seg" "$cycle"
    rss+=("$RSS")
  done
  # RSS: the first cycle warms up; the second is the reference.
  if [ "${#rss[@]}" -ge 3 ]; then
    ref=${rss[1]}
    for i in $(seq 2 $((${#rss[@]} - 1))); do
      dev=$(( (rss[i] - ref) * 1000 / ref ))
      ok=$([ "${dev#-}" -le 50 ] && echo true || echo false)
      record "{\"check\":\"rss\",\"segment\":$seg,\"cycle\":$((i + 1)),\"rss_kb\":${rss[i]},\"ref_kb\":$ref,\"deviation_permille\":$dev,\"ok\":$ok}"
      [ "$ok" = true ] || fail "segment $seg: RSS ${rss[i]} kB after cycle $((i + 1)), ${dev} permille from ${ref} kB"
    done
  else
    record "{\"check\":\"rss\",\"segment\":$seg,\"samples\":${#rss[@]},\"ok\":null,\"note\":\"too few cycles to compare\"}"
  fi
  echo "soak: segment $seg RSS after each cycle (kB): ${rss[*]}" >&2
  fx_stop_broker
done

echo "soak: $seg segment(s), $(grep -c . "$RESULTS") result line(s) in $RESULTS" >&2
if [ "$FAILS" = 0 ]; then echo "soak: PASS"; exit 0; fi
echo "soak: FAIL ($FAILS check(s) failed)"
exit 1
