#!/usr/bin/env bash
# attack.sh - hostile clients against a broker with the shipped defaults, one attack at a
# time, while a legitimate client publishes with per-message acks every 2 s.
#
# For each attack: a fresh felix-broker (Release, 127.0.0.1, shipped shedding defaults),
# felix-attack from 127.0.0.2 for SECONDS, and `felix pub --ack per_message` every 2 s from
# 127.0.0.1 (each with a 5 s limit). Prints one table row per attack: legitimate publishes
# acked, the slowest, the broker's RSS (start, peak, 5 s after the attack), whether /live
# still answered, and what the attacker saw (connections the broker closed, stream resets).
#
# usage: bench/attack.sh [--seconds S] [ATTACK...]
#   ATTACK   budget-hog reply-flood json-bomb uni-churn idle-conns (default: all five)
# example:
#   bench/attack.sh --seconds 20 budget-hog json-bomb
# env: BUILD (default <repo>/build/bench), OUTDIR (default /tmp/felix-attack/<timestamp>),
#      FX_PORT, FX_ADMIN, BROKER_ARGS (extra --set k=v for the broker)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench}
OUTDIR=${OUTDIR:-/tmp/felix-attack/$(date +%Y%m%dT%H%M%S)}
FX_PORT=${FX_PORT:-15931}
FX_ADMIN=${FX_ADMIN:-18931}
FX_TAG=attack
SECONDS_PER=20
ATTACKS=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) SECONDS_PER=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ATTACKS+=("$1"); shift ;;
  esac
done
[ ${#ATTACKS[@]} -gt 0 ] || ATTACKS=(budget-hog reply-flood json-bomb uni-churn idle-conns)
mkdir -p "$OUTDIR"

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
fx_build_if_missing
if [ ! -x "$BUILD/felix-attack" ] || [ ! -x "$BUILD/felix" ]; then
  cmake --build "$BUILD" --target felix-attack felix -j2 >/dev/null
fi
fx_traps

rss_kb() { awk '/^VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# legit N: one acked publish every 2 s until the attack ends; prints "acked total slowest_ms".
legit() {
  local until=$1 acked=0 total=0 slowest=0 t0 t1
  while [ "$(now_ms)" -lt "$until" ]; do
    t0=$(now_ms)
    total=$((total + 1))
    if FELIX_SERVER=127.0.0.1:$FX_PORT FELIX_PIN=$FP timeout -s KILL 5 \
         "$BUILD/felix" pub --ack per_message t1/default/legit "ping $total" >/dev/null 2>>"$OUTDIR/legit.err"; then
      acked=$((acked + 1))
    fi
    t1=$(now_ms)
    [ $((t1 - t0)) -gt "$slowest" ] && slowest=$((t1 - t0))
    sleep "$(awk -v d=$((t1 - t0)) 'BEGIN{s=(2000-d)/1000; print (s>0?s:0)}')"
  done
  echo "$acked $total $slowest"
}

echo "| attack (${SECONDS_PER} s, from 127.0.0.2) | legit acked | slowest ms | broker RSS MB start / peak / after | /live | attacker: conns up, closed by broker, resets seen |"
echo "|---|---|---:|---|---|---|"
for a in "${ATTACKS[@]}"; do
  # shellcheck disable=SC2086
  FX_LOSSLESS=0 fx_start_broker "$OUTDIR/broker-$a.log" "$OUTDIR/state-$a" ${BROKER_ARGS:-}
  sleep 0.5
  rss0=$(rss_kb "$BROKER_PID") peak=$rss0
  "$BUILD/felix-attack" --server "127.0.0.1:$FX_PORT" --pin "$FP" --bind 127.0.0.2 \
    --attack "$a" --seconds "$SECONDS_PER" >"$OUTDIR/attack-$a.json" 2>"$OUTDIR/attack-$a.err" &
  apid=$!
  legit $(( $(now_ms) + SECONDS_PER * 1000 )) >"$OUTDIR/legit-$a.txt" &
  lpid=$!
  while kill -0 "$apid" 2>/dev/null; do
    r=$(rss_kb "$BROKER_PID"); [ "$r" -gt "$peak" ] && peak=$r
    sleep 1
  done
  wait "$apid" || true
  wait "$lpid" || true
  live=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$FX_ADMIN/live" || echo down)
  sleep 5
  rss1=$(rss_kb "$BROKER_PID")
  read -r acked total slowest <"$OUTDIR/legit-$a.txt"
  summary=$(jq -r '"\(.conns_up), \(.conns_closed_by_broker), \(.stream_resets_seen)"' "$OUTDIR/attack-$a.json" 2>/dev/null || echo "?")
  printf '| %s | %s of %s | %s | %.0f / %.0f / %.0f | %s | %s |\n' "$a" "$acked" "$total" "$slowest" \
    "$(echo "$rss0/1024" | bc -l)" "$(echo "$peak/1024" | bc -l)" "$(echo "$rss1/1024" | bc -l)" "$live" "$summary"
  fx_stop_broker
done
echo "logs: $OUTDIR" >&2
