#!/bin/sh
# Every metric docs/grafana/felix.json queries exists in a running broker's
# /metrics (histograms by their _bucket/_sum/_count series).
# usage: tests/ui/grafana_metrics.sh BUILD_DIR SOURCE_DIR
set -eu
B=$1 SRC=$2
T=$(mktemp -d /tmp/fxgraf.XXXXXX)
BROKER_PID=
cleanup() {
  if [ -n "$BROKER_PID" ]; then kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null || true; fi
  rm -rf "$T"
}
trap cleanup EXIT
"$B/felix-broker" --set quic_bind=127.0.0.1:0 --set metrics_bind=127.0.0.1:0 \
  --set state_dir="$T/state" --set log_level=warn >"$T/broker.log" 2>&1 &
BROKER_PID=$!
for _ in $(seq 1 100); do grep -aq 'admin HTTP on' "$T/broker.log" && break; sleep 0.1; done
ADMIN=$(sed -n 's/.*admin HTTP on .* (port \([0-9]*\)).*/\1/p' "$T/broker.log" | head -1)
[ -n "$ADMIN" ] || { cat "$T/broker.log"; exit 1; }
curl -s "http://127.0.0.1:$ADMIN/metrics" | awk '!/^#/ {sub(/[{ ].*/, "", $1); print $1}' |
  sort -u >"$T/served"
[ -s "$T/served" ] || { echo "FAIL: /metrics answered nothing"; exit 1; }
grep -o 'felix_[a-z0-9_]*' "$SRC/docs/grafana/felix.json" | sort -u >"$T/named"
missing=$(comm -23 "$T/named" "$T/served")
n=$(wc -l <"$T/named")
if [ -n "$missing" ]; then
  echo "FAIL: docs/grafana/felix.json names metrics /metrics does not serve:"; echo "$missing"
  exit 1
fi
echo "ok: all $n metrics the dashboard names are served"
