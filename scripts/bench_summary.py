#!/usr/bin/env python3
"""Side-by-side benchmark table and hand-off chart from the bench programs' JSON.

    scripts/bench_summary.py DIR          # reads DIR/{sqlite,postgres,redis,etcd,zookeeper}.json
        --markdown FILE                   # the tables (default: stdout)
        --svg FILE                        # the hand-off chart

sqlite.json is `dlock bench --json` on the default store (it has no peer
library), sqlite_prog.json `dlock_bench_sqlite --json`; the others are the per-store programs' --json output (bench/*.cc).
Every number is copied from those files; nothing is computed here except
ratios of two numbers measured in the same run.
"""
import argparse
import html
import json
import os
import sys


def load(d, name):
    path = os.path.join(d, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def spread(counts):
    if not counts:
        return None
    mean = sum(counts) / len(counts)
    return max(abs(c - mean) for c in counts) / mean if mean else None


def rows_from(d):
    """(store, lock, acq/s, handoff p50 us, p99 us, fairness text, cycle/floor) rows."""
    rows = []
    s = load(d, "sqlite")
    if s:
        h = s.get("handoff") or {}
        hot = s.get("hot_key") or {}
        # The cycle against two raw write transactions: dlock_bench_sqlite's
        # figure (sqlite_prog.json) when present; `dlock bench`'s floor is
        # one Ping.
        prog = load(d, "sqlite_prog")
        ratio = prog["ratios"]["cycle_over_floor_p50"]["value"] if prog else None
        rows.append(("SQLite", "dlock", hot.get("ops_per_s"), h.get("p50_us"), h.get("p99_us"),
                     fair(hot.get("per_contender")), ratio))
    p = load(d, "postgres")
    if p:
        r = p["results"]
        secs = p.get("handoff_seconds") or 5
        counts = r.get("grants_per_process")
        rows.append(("PostgreSQL", "dlock", sum(counts) / secs if counts else None,
                     r["handoff"]["p50_us"], r["handoff"]["p99_us"], fair(counts),
                     p["ratios"]["cycle_over_floor_p50"]["value"]))
    r = load(d, "redis")
    if r:
        ratio = r["cycle"]["p50_us"] / r["floor"]["p50_us"]
        for name, c in r["contended"].items():
            if not c.get("measured"):
                rows.append(("Redis", name, None, None, None, c.get("reason", "not measured"), None))
                continue
            extra = "max wait %.1f ms" % (c["wait_max_us"] / 1000)
            rows.append(("Redis", name, c["per_second"], c["handoff"]["p50_us"], c["handoff"]["p99_us"],
                         fair(c["counts"]) + ", " + extra, ratio if name == "dlock" else None))
    e = load(d, "etcd")
    if e:
        ratio = e["targets"]["cycle_over_floor"]["value"]
        for c in e["contended"]:
            if "skipped" in c:
                rows.append(("etcd", c["peer"], None, None, None, "skipped: " + os.path.basename(c["skipped"]), None))
                continue
            rows.append(("etcd", c["peer"], c["per_second"], c["handoff"]["p50_us"], c["handoff"]["p99_us"],
                         "%d overlaps" % c.get("overlaps", 0), ratio if c["peer"] == "dlock" else None))
    z = load(d, "zookeeper")
    if z:
        ratio = z["cycle_us_p50"] / z["floor_us_p50"]
        for name, c in z["contended"].items():
            rows.append(("ZooKeeper", name, c["per_second"], c["handoff_p50_us"], c["handoff_p99_us"],
                         "FIFO violations %d of %d" % (c["fifo_violations"], c["grants"]),
                         ratio if name == "dlock" else None))
    return rows


def fair(counts):
    if not counts:
        return ""
    return "counts %s (±%.0f%%)" % (" ".join(str(int(c)) for c in counts), 100 * spread(counts))


def num(v, fmt="%.0f"):
    return "—" if v is None else fmt % v


def markdown(rows):
    out = ["| store | lock | acquisitions/s | hand-off p50 µs | hand-off p99 µs | fairness | cycle / floor (p50) |",
           "| --- | --- | ---: | ---: | ---: | --- | ---: |"]
    for store, lock, rate, p50, p99, fairness, ratio in rows:
        name = "**%s**" % lock if lock.startswith("dlock") else lock
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            store, name, num(rate), num(p50), num(p99), fairness, num(ratio, "%.2f")))
    return "\n".join(out) + "\n"


def svg(rows):
    """Horizontal bars: hand-off p50 (solid) and p99 (light) per lock, log scale."""
    import math
    measured = [r for r in rows if r[3]]
    lo, hi = 100.0, max(r[4] or r[3] for r in measured) * 4
    width, left, bar, gap, top = 860, 250, 16, 8, 40
    height = top + len(measured) * (bar + gap) + 40

    def x(us):
        return left + (width - left - 20) * (math.log10(max(us, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (width, height),
             '<rect width="100%" height="100%" fill="white"/>',
             '<text x="10" y="20" font-size="14" font-weight="bold">Hand-off under 4 contenders on one key: p50 (dark) and p99 (light), log scale</text>']
    tick = lo
    while tick <= hi:
        tx = x(tick)
        parts.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (tx, top - 5, tx, height - 35))
        label = "%g ms" % (tick / 1000) if tick >= 1000 else "%g µs" % tick
        parts.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>' % (tx, height - 20, label))
        tick *= 10
    y = top
    for store, lock, rate, p50, p99, _, _ in measured:
        mine = lock.startswith("dlock")
        dark, light = ("#1f5fa8", "#a9c6ea") if mine else ("#777", "#d0d0d0")
        parts.append('<text x="%d" y="%d" text-anchor="end"%s>%s · %s</text>' % (
            left - 8, y + bar - 4, ' font-weight="bold"' if mine else "", html.escape(store), html.escape(lock)))
        if p99:
            parts.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (left, y, x(p99) - left, bar, light))
        parts.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (left, y + 3, x(p50) - left, bar - 6, dark))
        parts.append('<text x="%.1f" y="%d" fill="#333">%s / %s</text>' % (
            x(p99 or p50) + 4, y + bar - 4, fmt_us(p50), fmt_us(p99) if p99 else "—"))
        y += bar + gap
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def fmt_us(us):
    return "%.1f ms" % (us / 1000) if us >= 1000 else "%.0f µs" % us


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--markdown")
    ap.add_argument("--svg")
    a = ap.parse_args()
    rows = rows_from(a.dir)
    if not rows:
        sys.exit("bench_summary: no <store>.json in " + a.dir)
    md = markdown(rows)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md)
    else:
        sys.stdout.write(md)
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg(rows))


if __name__ == "__main__":
    main()
