#!/bin/sh
# The admin endpoint's /ui page, rendered by headless Chromium against a broker
# under a slow-consumer load: the checkpoint-5 drop counter the page shows must
# lie between the broker's felix_sub_queue_dropped_total read before and after
# the load (so the page draws what /v1/pipeline says, and /v1/pipeline what
# the metrics say).
# usage: tests/ui/pipeline_ui.sh BUILD_DIR   (exit 77 = skipped: no chromium)
set -eu
B=$1
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  echo "SKIP: chromium is not installed (scripts/deps.sh installs it)"
  exit 77
fi
T=$(mktemp -d /tmp/fxui.XXXXXX)
BROKER_PID= BENCH_PID=
cleanup() {
  if [ -n "$BENCH_PID" ]; then kill "$BENCH_PID" 2>/dev/null || true; fi
  if [ -n "$BROKER_PID" ]; then kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null || true; fi
  rm -rf "$T"
}
trap cleanup EXIT

"$B/felix-broker" --set quic_bind=127.0.0.1:0 --set metrics_bind=127.0.0.1:0 \
  --set state_dir="$T/state" --set log_level=warn --set subscriber_lane_queue_policy=block \
  >"$T/broker.log" 2>&1 &
BROKER_PID=$!
for _ in $(seq 1 100); do
  grep -aq 'admin HTTP on' "$T/broker.log" && break
  sleep 0.1
done
QUIC=$(sed -n 's/.*(UDP port \([0-9]*\)).*/\1/p' "$T/broker.log" | head -1)
ADMIN=$(sed -n 's/.*admin HTTP on .* (port \([0-9]*\)).*/\1/p' "$T/broker.log" | head -1)
PIN=$(sed -n 's/.*certificate SHA-256 \([0-9a-f]\{64\}\).*/\1/p' "$T/broker.log" | head -1)
[ -n "$QUIC" ] && [ -n "$ADMIN" ] && [ -n "$PIN" ] || { cat "$T/broker.log"; exit 1; }

drops() {
  curl -s "http://127.0.0.1:$ADMIN/metrics" | awk '$1 == "felix_sub_queue_dropped_total" {print $2}'
}
before=$(drops)
# A stalled subscriber; its writer lane blocks, so its subscriber queue
# (checkpoint 5, drop_new as shipped) is where the stream sheds. The page is
# rendered while the load runs. (The load's verdict on its healthy subscriber
# does not matter here: only the drops.)
"$B/felix-bench" --server "127.0.0.1:$QUIC" --pin "$PIN" --mode overload --fanout 2 \
  --min-seconds 4 --max-seconds 10 --quiet >"$T/bench.log" 2>&1 &
BENCH_PID=$!
sleep 1.5
"$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$T/profile" --virtual-time-budget=3000 --dump-dom \
  "http://127.0.0.1:$ADMIN/ui" >"$T/dom.html" 2>"$T/chromium.log" || true
wait "$BENCH_PID" || true
after=$(drops)
echo "felix_sub_queue_dropped_total: before $before, after $after"
[ "$after" -gt "$before" ] || { echo "FAIL: the load caused no checkpoint-5 drops"; exit 1; }
shown=$(sed -n 's/.*id="cp5-drops"[^>]*>\([0-9]*\)<.*/\1/p' "$T/dom.html" | head -1)
echo "page shows checkpoint-5 drops: ${shown:-nothing}"
if [ -z "$shown" ]; then
  echo "FAIL: no #cp5-drops in the rendered page"; head -c 2000 "$T/dom.html"; tail -5 "$T/chromium.log"
  exit 1
fi
[ "$shown" -ge "$before" ] && [ "$shown" -le "$after" ] || {
  echo "FAIL: the page shows $shown, outside [$before, $after]"; exit 1; }
if [ -n "${FX_UI_SCREENSHOT:-}" ]; then
  "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$T/profile2" --virtual-time-budget=5000 --window-size=1280,800 \
    --screenshot="$FX_UI_SCREENSHOT" "http://127.0.0.1:$ADMIN/ui" 2>/dev/null || true
fi
echo "ok"
