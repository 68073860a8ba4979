#!/usr/bin/env python3
"""render_charts.py - SVG charts and a median table from benchmark JSONL.

Reads JSON lines written by felix-bench --json and by ../shared/peers
(peerbench, via run-peers.sh), groups them into cells (mode, fanout, payload,
system) and writes into --out:
  throughput.svg   delivered msg/s by payload, one group of payloads per fanout
  latency_p50.svg  p50 latency (us), same layout
  latency_p99.svg  p99 latency (us), same layout
  summary.md       the medians behind the bars, with run counts
Each bar is the median of the cell's valid runs; a thin whisker spans the
smallest and largest valid run; a cell with no valid run is drawn as "n/a"
(invalid runs never give a figure). Python 3 standard library only, so the
charts can be re-rendered from saved results anywhere:
  bench/render_charts.py --out DIR results.jsonl [more.jsonl ...]
  bench/render_charts.py --self-test
"""
import argparse
import json
import math
import os
import re
import sys
from xml.sax.saxutils import escape

# Felix-C first, then the peers in a fixed order; unknown systems sort after.
SYSTEM_ORDER = ["felix-c", "felix-c-b64", "nats-tls", "nats", "redis", "mqtt0", "mqtt1"]
SYSTEM_NAMES = {
    "felix-c": "Felix-C",
    "felix-c-b64": "Felix-C (--batch 64)",
    "nats-tls": "NATS (TLS)",
    "nats": "NATS (plain TCP)",
    "redis": "Redis (plain TCP)",
    "mqtt0": "Mosquitto QoS 0",
    "mqtt1": "Mosquitto QoS 1",
}
COLORS = ["#1f6fb4", "#7fb2e0", "#e8842c", "#3a9a3a", "#c43c3c", "#8a62b5", "#8c5a4b"]

# peerbench prints C's "nan"/"inf" for figures it could not measure.
_BARE_NONFINITE = re.compile(r'(?<=[:,\[])\s*-?(nan|inf)\b', re.IGNORECASE)


# ---- reading ----------------------------------------------------------------


def parse_line(line):
    """One JSON object from |line|, bare nan/inf as None; None for blank or
    comment lines. Raises ValueError on anything else that is not JSON."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    obj = json.loads(_BARE_NONFINITE.sub("null", line))
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def system_of(row):
    """The series a row belongs to: felix-c (one message per publish call),
    felix-c-b64 (throughput with --batch 64), nats-tls, nats, redis, mqtt0, ..."""
    if row.get("tool") == "felix-bench" or row.get("backend") == "felix":
        b = row.get("batch")
        if row.get("mode") == "throughput" and isinstance(b, int) and b > 1:
            return "felix-c-b%d" % b
        m = _CELL_LABEL.match(str(row.get("label", "")))
        if b is None and m and m.group("system").startswith("felix-c"):
            return m.group("system")  # an error line: only its cell label
        return "felix-c"
    backend = row.get("backend")
    if backend is None:
        # Error lines carry only the label; run-peers.sh labels start with the backend.
        label = str(row.get("label", ""))
        return label.split("_", 1)[0] if "_" in label else (label or "unknown")
    if backend == "mqtt":
        return "mqtt%s" % row.get("qos", "?")
    return backend + ("-tls" if row.get("tls") else "")


def load(paths):
    """Rows of every file in |paths|; prints and skips unparsable lines."""
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                try:
                    row = parse_line(line)
                except ValueError as e:
                    print("render_charts: %s:%d: skipped (%s)" % (path, n, e), file=sys.stderr)
                    continue
                if row is not None:
                    rows.append(row)
    return rows


# ---- cells ------------------------------------------------------------------


def median(values):
    """Median (mean of the two middle values for an even count); None if empty."""
    v = sorted(values)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2.0


def _finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# Cell labels of bench/matrix.sh and run-peers.sh: SYSTEM_MODE_pPAYLOAD_fFANOUT.
_CELL_LABEL = re.compile(r"^(?P<system>.+)_(?P<mode>throughput|latency)_p(?P<payload>\d+)_f(?P<fanout>\d+)$")


def with_cell(row):
    """|row|, with mode/payload/fanout taken from its cell label when missing
    (the error line of a run that failed to start has only the label)."""
    if all(k in row for k in ("mode", "payload", "fanout")):
        return row
    m = _CELL_LABEL.match(str(row.get("label", "")))
    if not m:
        return row
    filled = dict(row)
    filled.setdefault("mode", m.group("mode"))
    filled.setdefault("payload", int(m.group("payload")))
    filled.setdefault("fanout", int(m.group("fanout")))
    return filled


def cells(rows, mode, field):
    """{(fanout, payload, system): {"values": [...], "runs": n, "invalid": k}}
    for rows of |mode|. Only valid runs with a finite |field| give values;
    failed and invalid runs count in "invalid"."""
    out = {}
    for r in map(with_cell, rows):
        if r.get("mode") != mode or "fanout" not in r or "payload" not in r:
            continue
        key = (int(r["fanout"]), int(r["payload"]), system_of(r))
        c = out.setdefault(key, {"values": [], "runs": 0, "invalid": 0})
        c["runs"] += 1
        if r.get("valid") is True and _finite(r.get(field)):
            c["values"].append(float(r[field]))
        else:
            c["invalid"] += 1
    return out


def system_rank(s):
    """Sort key: Felix-C first, then the known peers, then the rest by name."""
    return (SYSTEM_ORDER.index(s) if s in SYSTEM_ORDER else len(SYSTEM_ORDER), s)


def order_systems(systems):
    return sorted(set(systems), key=system_rank)


# ---- SVG --------------------------------------------------------------------


def nice_ticks(vmax, count=5):
    """Round axis ticks from 0 to at least |vmax| (about |count| steps)."""
    if not vmax or vmax <= 0 or not math.isfinite(vmax):
        return [0.0, 1.0]
    raw = vmax / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = int(math.ceil(vmax / step - 1e-9))
    return [i * step for i in range(n + 1)]


def fmt_num(v):
    """Short label: 359k, 1.2M, 73.4, 1234."""
    if v is None:
        return "n/a"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return "%.3gM" % (v / 1e6)
    if a >= 1e4:
        return "%.0fk" % (v / 1e3)
    if a >= 100 or v == int(v):
        return "%.0f" % v
    return "%.1f" % v


# Geometry of a chart, in pixels.
BAR_W, BAR_GAP, GROUP_GAP = 26, 2, 18
PANEL_LEFT, PANEL_GAP, TOP, PLOT_H = 70, 36, 58, 300


def svg_bar_chart(title, ylabel, cellmap, note=""):
    """A grouped bar chart as SVG text. |cellmap| is cells()'s result: one
    panel per fanout, each with its own y axis from 0 (fanout 10 moves ten
    times the deliveries of fanout 1), one group per payload inside it, one
    bar per system (class="bar", data-cell="f<fanout>/p<payload>/<system>"),
    a min-max whisker when a cell has several valid runs, "n/a" (class="na")
    for a cell without a valid run, and a legend (class="legend") with one
    entry per system."""
    fanouts = sorted({k[0] for k in cellmap})
    systems = order_systems(k[2] for k in cellmap)
    x = 24
    body = []
    for f in fanouts:
        panel, w = _panel(cellmap, f, systems, x, ylabel)
        body.extend(panel)
        x += w + PANEL_GAP
    width = max(x - PANEL_GAP + 16, 360)
    legend_y = TOP + PLOT_H + 52
    height = legend_y + 22 * len(systems) + (26 if note else 12)
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
        'font-family="sans-serif" font-size="11">' % (width, height, width, height),
        '<rect width="100%" height="100%" fill="white"/>',
        '<text x="24" y="22" font-size="15" font-weight="bold">%s</text>' % escape(title),
        '<text x="24" y="40" fill="#555">%s; x: payload in bytes</text>' % escape(ylabel),
    ]
    out.extend(body)
    for i, s in enumerate(systems):
        y = legend_y + 22 * i
        out.append('<g class="legend"><rect x="24" y="%d" width="14" height="14" fill="%s"/>'
                   '<text x="44" y="%d">%s</text></g>'
                   % (y, COLORS[i % len(COLORS)], y + 11, escape(SYSTEM_NAMES.get(s, s))))
    if note:
        out.append('<text x="24" y="%d" fill="#555">%s</text>'
                   % (legend_y + 22 * len(systems) + 12, escape(note)))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _panel(cellmap, f, systems, x, ylabel):
    """One fanout's panel at horizontal offset |x|: axes, ticks, groups.
    Returns (SVG elements, panel width)."""
    payloads = sorted({k[1] for k in cellmap if k[0] == f})
    group_w = len(systems) * (BAR_W + BAR_GAP) - BAR_GAP
    plot_w = len(payloads) * (group_w + GROUP_GAP) + GROUP_GAP
    left, base = x + PANEL_LEFT, TOP + PLOT_H
    vmax = max([0.0] + [v for k, c in cellmap.items() if k[0] == f for v in c["values"]])
    ticks = nice_ticks(vmax)

    def y_of(v):
        return base - PLOT_H * (v / ticks[-1])

    out = ['<g class="panel" data-fanout="%d">' % f]
    for t in ticks:
        y = y_of(t)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (left, y, left + plot_w, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (left - 6, y + 4, fmt_num(t)))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (left, TOP, left, base))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (left, base, left + plot_w, base))
    out.append('<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle" font-size="10">'
               '%s</text>' % (x + 10, TOP + PLOT_H // 2, escape(ylabel)))
    gx = left + GROUP_GAP
    for p in payloads:
        out.extend(_group(cellmap, f, p, systems, gx, BAR_W, BAR_GAP, y_of, base))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d B</text>' % (gx + group_w / 2.0, base + 16, p))
        gx += group_w + GROUP_GAP
    out.append('<text x="%.1f" y="%d" text-anchor="middle" font-weight="bold">fanout %d</text>'
               % (left + plot_w / 2.0, base + 36, f))
    out.append("</g>")
    return out, PANEL_LEFT + plot_w


def _group(cellmap, f, p, systems, x, bar_w, bar_gap, y_of, base):
    """The bars of one (fanout, payload) group, as SVG elements."""
    out = []
    for i, s in enumerate(systems):
        bx = x + i * (bar_w + bar_gap)
        c = cellmap.get((f, p, s))
        if c is None:
            continue  # this system did not run the cell: leave the slot empty
        tag = 'data-cell="f%d/p%d/%s"' % (f, p, escape(s))
        med = median(c["values"])
        if med is None:
            out.append('<text class="na" %s x="%.1f" y="%d" text-anchor="middle" fill="#c00" '
                       'font-size="9">n/a</text>' % (tag, bx + bar_w / 2.0, base - 4))
            continue
        y = y_of(med)
        tip = "%s, fanout %d, %d B: median %s of %d valid run(s)" % (
            SYSTEM_NAMES.get(s, s), f, p, fmt_num(med), len(c["values"]))
        if c["invalid"]:
            tip += ", %d invalid" % c["invalid"]
        out.append('<rect class="bar" %s x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s">'
                   '<title>%s</title></rect>'
                   % (tag, bx, y, bar_w, base - y, COLORS[i % len(COLORS)], escape(tip)))
        if len(c["values"]) > 1:
            cx = bx + bar_w / 2.0
            out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>'
                       % (cx, y_of(min(c["values"])), cx, y_of(max(c["values"]))))
        out.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>'
                   % (bx + bar_w / 2.0, min(y, y_of(max(c["values"]))) - 3, fmt_num(med)))
    return out


# ---- outputs ----------------------------------------------------------------

CHARTS = [
    ("throughput.svg", "throughput", "msgs_per_s", "Throughput (lossless): delivered msg/s, higher is better",
     "deliveries per second (all subscribers)"),
    ("latency_p50.svg", "latency", "p50_us", "Latency p50, publish to delivery: lower is better",
     "microseconds"),
    ("latency_p99.svg", "latency", "p99_us", "Latency p99, publish to delivery: lower is better",
     "microseconds"),
]


def summary_md(rows):
    """A Markdown table of the medians behind every chart."""
    lines = ["| chart | fanout | payload | system | median | valid / runs |", "|---|---:|---:|---|---:|---|"]
    for fname, mode, field, _title, _ylabel in CHARTS:
        cm = cells(rows, mode, field)
        for (f, p, s) in sorted(cm, key=lambda k: (k[0], k[1], system_rank(k[2]))):
            c = cm[(f, p, s)]
            lines.append("| %s | %d | %d | %s | %s | %d / %d |" % (
                fname[:-4], f, p, SYSTEM_NAMES.get(s, s), fmt_num(median(c["values"])),
                len(c["values"]), c["runs"]))
    return "\n".join(lines) + "\n"


def render(rows, outdir, note=""):
    """Writes the charts and summary.md into |outdir|; returns the paths."""
    os.makedirs(outdir, exist_ok=True)
    written = []
    for fname, mode, field, title, ylabel in CHARTS:
        cm = cells(rows, mode, field)
        if not cm:
            continue
        path = os.path.join(outdir, fname)
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg_bar_chart(title, ylabel, cm, note))
        written.append(path)
    path = os.path.join(outdir, "summary.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(summary_md(rows))
    written.append(path)
    return written


# ---- self-test --------------------------------------------------------------


def self_test():
    """Checks the pure parts on known input; returns 0 or raises AssertionError."""
    import xml.etree.ElementTree as ET

    assert parse_line("") is None and parse_line("# comment") is None
    r = parse_line('{"p50_us":nan,"x":-inf,"y":1.5}')
    assert r == {"p50_us": None, "x": None, "y": 1.5}, r
    assert system_of({"tool": "felix-bench", "backend": "felix"}) == "felix-c"
    assert system_of({"tool": "felix-bench", "mode": "throughput", "batch": 1}) == "felix-c"
    assert system_of({"tool": "felix-bench", "mode": "throughput", "batch": 64}) == "felix-c-b64"
    assert system_of({"tool": "felix-bench", "label": "felix-c-b64_throughput_p16_f1",
                      "error": "x"}) == "felix-c-b64"
    assert system_of({"backend": "nats", "tls": True}) == "nats-tls"
    assert system_of({"backend": "mqtt", "qos": 1, "tls": False}) == "mqtt1"
    assert system_of({"tool": "peerbench", "label": "redis_throughput_p16_f1", "error": "x"}) == "redis"
    assert median([3, 1, 2]) == 2 and median([4, 1, 2, 3]) == 2.5 and median([]) is None
    assert nice_ticks(359000)[-1] >= 359000 and nice_ticks(359000)[0] == 0
    assert nice_ticks(0) == [0.0, 1.0]
    assert [fmt_num(x) for x in (0, 2.14e6, 1e7, 358000, 73.44, 75.0)] == [
        "0", "2.14M", "10M", "358k", "73.4", "75"]

    rows = []
    for f in (1, 10):
        for p in (256, 1024):
            for run, v in enumerate((100.0, 300.0, 200.0)):
                rows.append({"tool": "felix-bench", "backend": "felix", "mode": "throughput",
                             "payload": p, "fanout": f, "valid": True, "msgs_per_s": v * f, "run": run})
            rows.append({"tool": "peerbench", "backend": "nats", "tls": True, "mode": "throughput",
                         "payload": p, "fanout": f, "valid": True, "msgs_per_s": 150.0 * f})
    # An invalid run never gives a figure, even with a number in the field.
    rows.append({"tool": "peerbench", "backend": "nats", "tls": True, "mode": "throughput",
                 "payload": 1024, "fanout": 10, "valid": False, "msgs_per_s": 1e9})
    cm = cells(rows, "throughput", "msgs_per_s")
    assert len(cm) == 8, cm
    assert median(cm[(1, 256, "felix-c")]["values"]) == 200.0
    assert cm[(10, 1024, "nats-tls")] == {"values": [1500.0], "runs": 2, "invalid": 1}
    # A cell whose only run failed is drawn as n/a, not as a bar (the error
    # line carries only its cell label).
    rows.append({"tool": "peerbench", "label": "redis_throughput_p256_f1", "error": "no output"})
    cm = cells(rows, "throughput", "msgs_per_s")
    assert cm[(1, 256, "redis")] == {"values": [], "runs": 1, "invalid": 1}

    svg = svg_bar_chart("T", "msg/s", cm, note="noisy & shared")
    root = ET.fromstring(svg)  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    bars = [e for e in root.iter(ns + "rect") if e.get("class") == "bar"]
    assert len(bars) == 8, len(bars)
    assert len({b.get("data-cell") for b in bars}) == 8
    nas = [e for e in root.iter(ns + "text") if e.get("class") == "na"]
    assert [e.get("data-cell") for e in nas] == ["f1/p256/redis"]
    legends = [e for e in root.iter(ns + "g") if e.get("class") == "legend"]
    names = ["".join(g.itertext()) for g in legends]
    assert names == ["Felix-C", "NATS (TLS)", "Redis (plain TCP)"], names
    # Bar heights are proportional to the medians within a panel (2000 vs 1500 at fanout 10),
    # and no bar rises above the plot area.
    h = {b.get("data-cell"): float(b.get("height")) for b in bars}
    assert abs(h["f10/p256/felix-c"] / h["f10/p256/nats-tls"] - 2000.0 / 1500.0) < 1e-3, h
    assert all(float(b.get("y")) >= TOP - 1e-6 for b in bars)
    assert "fanout 1<" in svg and "fanout 10<" in svg and "noisy &amp; shared" in svg
    panels = [e.get("data-fanout") for e in root.iter(ns + "g") if e.get("class") == "panel"]
    assert panels == ["1", "10"], panels
    md = summary_md(rows)
    assert "| throughput | 10 | 1024 | NATS (TLS) | 1500 | 1 / 2 |" in md, md
    print("render_charts: self-test passed")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description="SVG charts from felix-bench / peerbench JSONL")
    ap.add_argument("jsonl", nargs="*", help="result files (JSON lines)")
    ap.add_argument("--out", help="output folder for the SVG charts and summary.md")
    ap.add_argument("--note", default="", help="a line printed under each chart's legend")
    ap.add_argument("--self-test", action="store_true", help="check the pure parts and exit")
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not a.jsonl or not a.out:
        ap.error("need --out DIR and at least one JSONL file")
    rows = load(a.jsonl)
    if not rows:
        print("render_charts: no result lines in %s" % " ".join(a.jsonl), file=sys.stderr)
        return 1
    for path in render(rows, a.out, a.note):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
