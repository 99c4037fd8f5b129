"""Summarises bench/status/run.sh's results.jsonl: a table (median over rounds) and
the ratios and targets. Usage: report.py RESULTS_JSONL FILES"""

import json
import statistics
import sys
from collections import defaultdict


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    files = int(sys.argv[2])
    groups = defaultdict(list)
    for r in rows:
        groups[(r["label"], r["tool"], r["connections"])].append(r)

    def med(key, label, tool="loadgen", conns=1):
        g = groups.get((label, tool, conns))
        return statistics.median(r[key] for r in g) if g else float("nan")

    print(f"\n{'':34} {'tool':9} {'conns':>5} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>9} {'errors':>6}  rounds")
    for (label, tool, conns), g in sorted(groups.items(), key=lambda kv: (kv[0][1] != "loadgen", kv[0][2], kv[0][0])):
        name = label.replace(" full", f" {files:,} files").replace(" empty", " empty root")
        print(
            f"{name:34} {tool:9} {conns:>5} {statistics.median(r['p50_ms'] for r in g):8.3f} "
            f"{statistics.median(r['p99_ms'] for r in g):8.3f} {statistics.median(r['requests_per_s'] for r in g):9.0f} "
            f"{sum(r['errors'] for r in g):6}  {len(g)}"
        )
    conns = max(c for (_, t, c) in groups if t == "loadgen")

    print("\nratios (medians over rounds)")
    for t in ("tcp", "unix"):
        e, f = f"lavenderd {t} empty", f"lavenderd {t} full"
        print(
            f"  lavenderd {t:4}: {files:,} files / empty root: p50 {med('p50_ms', f) / med('p50_ms', e):.2f}x, "
            f"throughput ({conns} conns) {med('requests_per_s', f, conns=conns) / med('requests_per_s', e, conns=conns):.2f}x"
        )
    for t in ("tcp", "unix"):
        lv, sv = f"lavenderd {t} full", f"supervisord {t}"
        print(
            f"  lavenderd {t:4} ({files:,} files) vs supervisord getAllProcessInfo: "
            f"p50 {med('p50_ms', sv) / med('p50_ms', lv):.1f}x lower, "
            f"throughput {med('requests_per_s', lv, conns=conns) / med('requests_per_s', sv, conns=conns):.1f}x higher"
        )
    for t in ("tcp", "unix"):
        for root in ("empty", "full"):
            lv, ref = f"lavenderd {t} {root}", f"reference {t}"
            tools = ("loadgen", "wrk") if t == "tcp" else ("loadgen",)
            parts = ", ".join(
                f"{tool} {med('requests_per_s', lv, tool, conns) / med('requests_per_s', ref, tool, conns):.2f}x"
                for tool in tools
            )
            print(
                f"  lavenderd {t:4} {root:5} / bare axum reference (same body): throughput ({conns} conns) {parts}; "
                f"p50 (1 conn) {med('p50_ms', lv):.3f} vs {med('p50_ms', ref):.3f} ms"
            )
    for root in ("empty", "full"):
        sh = med("p50_ms", f"shell script {root}", "hyperfine")
        lv = med("p50_ms", f"lavenderd unix {root}")
        print(f"  shell script / lavenderd unix, {root} root: p50 {sh / lv:,.0f}x slower ({sh:.1f} ms vs {lv:.3f} ms)")
    sh_growth = med("p50_ms", "shell script full", "hyperfine") / med("p50_ms", "shell script empty", "hyperfine")
    print(f"  shell script, {files:,} files / empty root: p50 {sh_growth:.2f}x")

    print("\ntargets")
    p50 = max(med("p50_ms", f"lavenderd {t} {r}") for t in ("tcp", "unix") for r in ("empty", "full"))
    print(f"  p50 at most 0.1 ms (1 conn): worst lavenderd p50 {p50:.3f} ms -> {'met' if p50 <= 0.1 else 'MISSED'}")
    worst_ref = min(
        med("requests_per_s", f"lavenderd {t} {r}", tool, conns) / med("requests_per_s", f"reference {t}", tool, conns)
        for t in ("tcp", "unix")
        for r in ("empty", "full")
        for tool in (("loadgen", "wrk") if t == "tcp" else ("loadgen",))
    )
    print(
        f"  >= 0.85x the bare reference ({conns} conns): worst {worst_ref:.2f}x -> {'met' if worst_ref >= 0.85 else 'MISSED'}"
    )
    worst_sv = min(
        med("requests_per_s", f"lavenderd {t} full", conns=conns)
        / med("requests_per_s", f"supervisord {t}", conns=conns)
        for t in ("tcp", "unix")
    )
    print(f"  >= 10x supervisord ({conns} conns): worst {worst_sv:.1f}x -> {'met' if worst_sv >= 10 else 'MISSED'}")
    best = {
        t: max(
            med("requests_per_s", f"lavenderd {t} full", tool, conns)
            for tool in (("loadgen", "wrk") if t == "tcp" else ("loadgen",))
        )
        for t in ("tcp", "unix")
    }
    ok = min(best.values()) >= 10_000
    print(
        f"  >= 10,000 req/s ({files:,} files): tcp {best['tcp']:,.0f}, unix {best['unix']:,.0f} -> {'met' if ok else 'MISSED'}"
    )
    growth = max(
        med(k, f"lavenderd {t} full", conns=c) / med(k, f"lavenderd {t} empty", conns=c)
        for t in ("tcp", "unix")
        for k, c in (("p50_ms", 1),)
    )
    print(
        f"  no growth with file count: worst p50 ratio full/empty {growth:.2f}x -> {'met' if growth < 1.25 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
