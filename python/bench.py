#!/usr/bin/env python3
"""Benchmark of the felix Python package: throughput counted at delivery
and publish -> delivery latency, 1 KiB messages by default.

    python3 python/bench.py --mode many       # publish_many, batches of --batch
    python3 python/bench.py --mode single     # one publish() call per message
    python3 python/bench.py --mode latency    # paced publishes, p50/p90/p99
    python3 python/bench.py --mode all --compare-c   # all three, and felix-bench's C figures

Without --server it starts felix-broker ($FELIX_BROKER, else build/release)
on 127.0.0.1 with ports the kernel picks and lossless queues (block at
checkpoints 4-6), so what is counted is what was delivered. The subscriber
is a Python process of its own (its own GIL): it counts every event and
reports the time of the first and the last; throughput is the measured
messages over (last delivery - first measured publish). Clocks are
CLOCK_MONOTONIC, shared by the processes. --compare-c runs felix-bench
against the same broker: its one-message-per-call throughput (--batch 1)
and its latency p50, printed beside the Python figures.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tests"))

# The release build's libfelix unless FELIX_LIBRARY names another one.
_BUILT = os.path.join(HERE, "..", "build", "release", "lib", "libfelix.so.0")
if not os.environ.get("FELIX_LIBRARY") and os.path.exists(_BUILT):
    os.environ["FELIX_LIBRARY"] = os.path.abspath(_BUILT)

import felix  # noqa: E402

NS = "default"
LOSSLESS = ("subscriber_queue_policy=block", "subscriber_lane_queue_policy=block",
            "pub_ingress_wait=true")


def now_ns() -> int:
    return time.monotonic_ns()


# ---- subscriber process ----------------------------------------------------------


def run_subscriber(args: argparse.Namespace) -> None:
    """--role sub: counts |args.expect| events, prints one JSON line."""
    with felix.Client(server=args.server, pin=args.pin, insecure=args.insecure or None,
                      sub_queue_policy="block", sub_queue_capacity=1024) as c:
        with c.subscribe(NS, args.stream) as sub:
            print("ready", flush=True)
            n, first, last, gaps = 0, 0, 0, 0
            lat: List[int] = []
            deadline = time.monotonic() + args.max_seconds
            while n < args.expect and time.monotonic() < deadline:
                ev = sub.get(timeout=1.0)
                if ev is None:
                    continue
                t = now_ns()
                if n == 0:
                    first = t
                last = t
                gaps += ev.gap
                if args.latency:
                    lat.append(t - struct.unpack_from("<Q", ev.payload)[0])
                n += 1
    out: Dict[str, object] = {"received": n, "first_ns": first, "last_ns": last, "gaps": gaps}
    if lat:
        lat.sort()
        out.update({q: lat[min(len(lat) - 1, int(len(lat) * f))] / 1000.0
                    for q, f in (("p50_us", 0.50), ("p90_us", 0.90), ("p99_us", 0.99))})
    print(json.dumps(out), flush=True)


def start_subscriber(args: argparse.Namespace, stream: str, expect: int,
                     latency: bool) -> subprocess.Popen:
    cmd = [sys.executable, os.path.abspath(__file__), "--role", "sub", "--server", args.server,
           "--stream", stream, "--expect", str(expect), "--max-seconds", str(args.max_seconds)]
    if args.pin:
        cmd += ["--pin", args.pin]
    if args.insecure:
        cmd += ["--insecure"]
    if latency:
        cmd += ["--latency"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    if line != "ready":
        p.kill()
        raise SystemExit("bench: the subscriber did not start (%r)" % line)
    return p


def finish_subscriber(p: subprocess.Popen) -> Dict[str, float]:
    out, _ = p.communicate(timeout=600)
    return json.loads(out.strip().splitlines()[-1])


# ---- publisher modes ---------------------------------------------------------------


def throughput(args: argparse.Namespace, c: felix.Client, mode: str) -> Dict[str, float]:
    stream = "pybench-%s-%d" % (mode, os.getpid())
    total = args.warmup + args.count
    sub = start_subscriber(args, stream, total, latency=False)
    payload = os.urandom(args.payload)
    if mode == "many":
        c.publish_many(NS, stream, (payload for _ in range(args.warmup)), batch_size=args.batch)
        t0 = now_ns()
        c.publish_many(NS, stream, (payload for _ in range(args.count)), batch_size=args.batch)
    else:
        for _ in range(args.warmup):
            c.publish(NS, stream, payload)
        t0 = now_ns()
        pub = c.publish
        for _ in range(args.count):
            pub(NS, stream, payload)
    t_pub = now_ns()
    r = finish_subscriber(sub)
    if r["received"] < total:
        raise SystemExit("bench: %s: %d of %d delivered within --max-seconds"
                         % (mode, r["received"], total))
    secs = (r["last_ns"] - t0) / 1e9
    return {"mode": mode, "messages": args.count, "payload": args.payload,
            "msgs_per_s": round(args.count / secs), "mib_per_s": round(
                args.count * args.payload / secs / (1 << 20), 1),
            "publish_calls_per_s": round(args.count / ((t_pub - t0) / 1e9)), "gaps": r["gaps"]}


def latency(args: argparse.Namespace, c: felix.Client) -> Dict[str, float]:
    stream = "pybench-lat-%d" % os.getpid()
    n = args.latency_count
    sub = start_subscriber(args, stream, n, latency=True)
    pad = bytes(max(0, args.payload - 8))
    interval = 1.0 / args.rate
    next_t = time.monotonic()
    for _ in range(n):
        c.publish(NS, stream, struct.pack("<Q", now_ns()) + pad)
        next_t += interval
        delay = next_t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    r = finish_subscriber(sub)
    return {"mode": "latency", "messages": n, "payload": args.payload, "rate": args.rate,
            "p50_us": r.get("p50_us"), "p90_us": r.get("p90_us"), "p99_us": r.get("p99_us")}


# ---- the C client's figures -----------------------------------------------------------


def c_bench(args: argparse.Namespace, extra: List[str]) -> Optional[dict]:
    exe = os.environ.get("FELIX_BENCH") or os.path.join(
        os.path.dirname(args.broker_exe) if args.broker_exe else
        os.path.join(HERE, "..", "build", "release"), "felix-bench")
    if not os.access(exe, os.X_OK):
        print("bench: %s is not there (set FELIX_BENCH): no C figures" % exe, file=sys.stderr)
        return None
    cmd = [exe, "--server", args.server, "--payload", str(args.payload), "--json", "--quiet"]
    cmd += ["--pin", args.pin] if args.pin else ["--insecure"]
    out = subprocess.run(cmd + extra, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        print("bench: felix-bench failed: %s" % out.stderr.strip(), file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- main -----------------------------------------------------------------------------


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("many", "single", "latency", "all"), default="all")
    ap.add_argument("--payload", type=int, default=1024, help="bytes per message (>= 8)")
    ap.add_argument("--count", type=int, default=200000, help="measured messages")
    ap.add_argument("--warmup", type=int, default=5000, help="unmeasured messages first")
    ap.add_argument("--batch", type=int, default=256, help="publish_many batch size")
    ap.add_argument("--latency-count", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=2000.0, help="latency: messages per second")
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--server", help="external broker (default: start felix-broker)")
    ap.add_argument("--pin")
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--broker", dest="broker_exe", help="felix-broker to start")
    ap.add_argument("--compare-c", action="store_true", help="also run felix-bench")
    ap.add_argument("--json", action="store_true", help="one JSON object per result")
    ap.add_argument("--role", choices=("pub", "sub"), default="pub", help=argparse.SUPPRESS)
    ap.add_argument("--stream", help=argparse.SUPPRESS)
    ap.add_argument("--expect", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--latency", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.payload < 8:
        ap.error("--payload must be >= 8 (the latency timestamp)")
    return args


def main() -> None:
    args = parse()
    if args.role == "sub":
        run_subscriber(args)
        return
    broker = None
    if args.server is None:
        from broker_proc import Broker  # python/tests/broker_proc.py

        exe = args.broker_exe or os.environ.get("FELIX_BROKER") or os.path.join(
            HERE, "..", "build", "release", "felix-broker")
        args.broker_exe = os.path.abspath(exe)
        broker = Broker(tempfile.mkdtemp(prefix="fxpybench") + "/state", LOSSLESS,
                        exe=args.broker_exe)
        args.server, args.pin = broker.server, broker.pin
    results = []
    try:
        with felix.Client(server=args.server, pin=args.pin,
                          insecure=args.insecure or None) as c:
            modes = ("many", "single", "latency") if args.mode == "all" else (args.mode,)
            for m in modes:
                results.append(latency(args, c) if m == "latency" else throughput(args, c, m))
        if args.compare_c:
            tp = c_bench(args, ["--mode", "throughput", "--batch", "1"])
            lat = c_bench(args, ["--mode", "latency"])
            results.append({"mode": "c", "c_one_per_call_msgs_per_s": tp and tp.get("msgs_per_s"),
                            "c_latency_p50_us": lat and lat.get("p50_us"), "raw_throughput": tp,
                            "raw_latency": lat})
    finally:
        if broker is not None:
            broker.stop()
    for r in results:
        if args.json:
            print(json.dumps(r))
        else:
            print("  ".join("%s=%s" % (k, v) for k, v in r.items() if not k.startswith("raw_")))


if __name__ == "__main__":
    main()
