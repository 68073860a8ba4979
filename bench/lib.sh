# lib.sh - shell functions shared by the benchmark scripts (sourced, not run).
#
# The caller sets, before calling:
#   BUILD    build directory holding felix-broker and felix-bench (Release)
#   ROOT     the source tree (for building BUILD when the binaries are missing)
#   FX_PORT, FX_ADMIN   the broker's QUIC and admin ports on 127.0.0.1
#   FX_TAG   the script's name, for messages
# Functions:
#   fx_build_if_missing            configures BUILD as Release and builds both binaries if needed
#   fx_start_broker LOG STATE [--set k=v]...
#                                  starts felix-broker with the lossless profile (block at
#                                  checkpoints 5 and 6, pub_ingress_wait; FX_LOSSLESS=0 keeps
#                                  the shipped shedding defaults) plus the extra keys; sets
#                                  BROKER_PID and FP (the certificate fingerprint)
#   fx_stop_broker                 SIGTERM, then SIGKILL after 5 s; only the PID started here
#   fx_bench ARGS...               runs felix-bench against that broker (--server, --pin,
#                                  --admin, --broker-pid, --json --quiet) with ARGS added
#   fx_traps                       stops the broker on exit, and exits on INT/TERM
#   fx_wait_quiet                  waits at most QUIET_MAX_S (default 10) seconds for the host
#                                  to be under QUIET_PCT (default 15) % of a core busy
# Only the PIDs these functions start are signalled.

BROKER_PID="" FP=""

fx_build_if_missing() {
  if [ ! -x "$BUILD/felix-bench" ] || [ ! -x "$BUILD/felix-broker" ]; then
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD" --target felix-bench felix-broker -j2 >/dev/null
  fi
}

fx_stop_broker() {
  [ -n "$BROKER_PID" ] || return 0
  kill -TERM "$BROKER_PID" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$BROKER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$BROKER_PID" 2>/dev/null || true
  wait "$BROKER_PID" 2>/dev/null || true
  BROKER_PID=""
}

fx_start_broker() {
  local log=$1 state=$2; shift 2
  local lossless=(--set subscriber_queue_policy=block --set subscriber_lane_queue_policy=block
                  --set pub_ingress_wait=true)
  [ "${FX_LOSSLESS:-1}" = 1 ] || lossless=()
  rm -rf "$state"
  : >"$log" # the broker's redirection happens in its child: the fingerprint poll may come first
  "$BUILD/felix-broker" --set quic_bind="127.0.0.1:$FX_PORT" --set metrics_bind="127.0.0.1:$FX_ADMIN" \
    --set state_dir="$state" --set log_level=warn "${lossless[@]}" "$@" >"$log" 2>&1 &
  BROKER_PID=$!
  for _ in $(seq 1 100); do
    FP=$(sed -n 's/.*certificate SHA-256 \([0-9a-f]\{64\}\).*/\1/p' "$log")
    [ -n "$FP" ] && return 0
    kill -0 "$BROKER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "$FX_TAG: felix-broker did not start; log ($log):" >&2; cat "$log" >&2; exit 1
}

fx_bench() {
  "$BUILD/felix-bench" --server "127.0.0.1:$FX_PORT" --pin "$FP" --admin "127.0.0.1:$FX_ADMIN" \
    --broker-pid "$BROKER_PID" --json --quiet "$@"
}

fx_traps() {
  trap fx_stop_broker EXIT
  trap 'fx_stop_broker; exit 130' INT TERM
}

# The machine may be shared: wait for a nearly idle host, as run-peers.sh does before each
# peer run. other_cpu_s in every felix-bench JSON line says what load remained.
fx_busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
fx_wait_quiet() {
  local max=${QUIET_MAX_S:-10} pct=${QUIET_PCT:-15} t0=$SECONDS a b c d load
  [ "$max" -gt 0 ] || return 0
  while :; do
    read -r a b < <(fx_busy_ticks); sleep 1; read -r c d < <(fx_busy_ticks)
    load=$(( 100 * (c - a) * $(nproc) / ( (d - b) > 0 ? (d - b) : 1 ) ))
    [ "$load" -lt "$pct" ] && return 0
    if [ $((SECONDS - t0)) -ge "$max" ]; then
      echo "$FX_TAG: host not quiet (${load}% of a core busy); running anyway" >&2; return 0
    fi
  done
}
