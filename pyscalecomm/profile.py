"""Summarise scalecomm timelines: where the time went, per collective and algorithm phase.

    SCALECOMM_TIMELINE=trace.json torchrun --nproc-per-node 2 train.py
    python -m pyscalecomm.profile trace.rank0.json trace.rank1.json

The timeline (SCALECOMM_TIMELINE, see docs/profiling.md) holds one span per
collective ("allreduce:ring", category "collective") and, inside it, the
executor's per-step spans (send, recv, recv+reduce, finalize, wait). This
prints, per collective:algorithm, the number of calls, total and mean time,
and per phase the busy time (summed span durations; phases overlap because
sends and receives run concurrently, so shares can add up to more than 100%),
its share of the collective's time, the bytes moved and the rate. ``wait`` is
time in which nothing could move (the executor idled): waiting for a slower
peer or for the network.

``--skew`` (give every rank's file) lines up each collective across ranks by
its group and sequence number and prints, per collective:algorithm, how far
apart the ranks started it and finished it (median and max), and which rank
was most often the last to start (a straggler: it posts late, so everyone
waits for it) and the last to finish. Timestamps are each host's
steady clock: across hosts the skews are as good as their clock sync (ranks
on one host, or the emulated cluster, share one clock).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import sys
from collections import Counter, defaultdict

from pyscalecomm._cli import HelpFormatter, add_version

PHASES = ["send", "recv", "recv+reduce", "finalize", "wait"]


def load_events(path: str) -> list[dict]:
    """Reads a trace in the JSON array format, with or without the closing bracket."""
    text = open(path).read().strip()
    if text.startswith("{"):
        return json.loads(text)["traceEvents"]
    text = text.rstrip(",")
    if not text.endswith("]"):
        text += "]"
    text = text.replace(",\n]", "\n]").replace(",]", "]")
    return json.loads(text)


def expand(path: str) -> list[str]:
    """The files a path names: itself, or, given the SCALECOMM_TIMELINE
    pattern the ranks wrote with, every rank's file ('{rank}' or '.rank<r>'
    before the extension), in rank order."""
    if os.path.exists(path):
        return [path]
    if "{rank}" in path:
        pattern = path.replace("{rank}", "*")
    else:
        stem, ext = os.path.splitext(path)
        pattern = f"{stem}.rank*{ext}"
    found = glob.glob(pattern)
    if not found:
        raise FileNotFoundError(
            f"no timeline at {path} nor any rank's file ({pattern}): run with SCALECOMM_TIMELINE={path} first"
        )

    def rank_of(f: str) -> int:
        m = re.findall(r"\d+", f[len(pattern.split("*")[0]) :])
        return int(m[0]) if m else 0

    return sorted(found, key=rank_of)


def merge(events: list[dict], out: str) -> None:
    """One Chrome/Perfetto trace of every rank's events (a process per rank)."""
    with open(out, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


def summarise(events: list[dict]) -> dict:
    """{collective_name: {"calls", "us", "phases": {phase: {"us", "bytes"}}}}."""
    out: dict = defaultdict(
        lambda: {"calls": 0, "us": 0.0, "phases": defaultdict(lambda: {"us": 0.0, "bytes": 0})}
    )
    colls = sorted(
        (e for e in events if e.get("cat") == "collective"), key=lambda e: (e["pid"], e["tid"], e["ts"])
    )
    for c in colls:
        out[c["name"]]["calls"] += 1
        out[c["name"]]["us"] += c["dur"]
    # attribute each step span to the collective span that contains it (same pid/tid)
    index = defaultdict(list)
    for c in colls:
        index[(c["pid"], c["tid"])].append(c)
    for e in events:
        if e.get("cat") != "step":
            continue
        for c in index[(e["pid"], e["tid"])]:
            if c["ts"] <= e["ts"] + 1e-3 and e["ts"] <= c["ts"] + c["dur"] + 1e-3:
                ph = out[c["name"]]["phases"][e["name"]]
                ph["us"] += e["dur"]
                ph["bytes"] += e.get("args", {}).get("bytes", 0)
                break
    return out


def skew(events: list[dict]) -> dict:
    """{"collective_name bytes": {"calls", "start_us": [...], "end_us": [...], "last_start": {rank: n},
    "last_end": {rank: n}}} over collectives that every traced rank ran (matched by group, seq),
    one row per collective:algorithm and message size."""
    ranks = {e["pid"] for e in events}
    by_call: dict = defaultdict(dict)
    for e in events:
        a = e.get("args", {})
        if e.get("cat") == "collective" and "seq" in a:
            by_call[(f"{e['name']} {a.get('bytes', 0)} B", a.get("group"), a["seq"])][e["pid"]] = e
    out: dict = defaultdict(
        lambda: {"calls": 0, "start_us": [], "end_us": [], "last_start": Counter(), "last_end": Counter()}
    )
    for (name, _, _), spans in by_call.items():  # trace order
        if len(spans) < 2 or set(spans) != ranks:
            continue
        starts = {r: e["ts"] for r, e in spans.items()}
        ends = {r: e["ts"] + e["dur"] for r, e in spans.items()}
        o = out[name]
        o["calls"] += 1
        o["start_us"].append(max(starts.values()) - min(starts.values()))
        o["end_us"].append(max(ends.values()) - min(ends.values()))
        o["last_start"][max(starts, key=starts.get)] += 1
        o["last_end"][max(ends, key=ends.get)] += 1
    return out


def format_skew(sk: dict) -> str:
    if not sk:
        return "# no collective was found in two or more of the traces (give every rank's file)"
    lines = [
        "# across ranks, per call: spread of start times and of end times (max - min over ranks)",
        f"{'collective':<32} {'calls':>6} {'start med(us)':>14} {'start max(us)':>14} "
        f"{'end med(us)':>12} {'end max(us)':>12}  {'last to start':>16} {'last to end':>16}",
    ]

    def most(c: Counter, calls: int) -> str:
        rank, n = c.most_common(1)[0]
        return f"rank {rank} ({100 * n / calls:.0f}%)"

    for name, o in sorted(sk.items(), key=lambda kv: -sum(kv[1]["end_us"])):
        st, en = o["start_us"], o["end_us"]
        lines.append(
            f"{name:<32} {o['calls']:>6} {statistics.median(st):>14.1f} {max(st):>14.1f} "
            f"{statistics.median(en):>12.1f} {max(en):>12.1f}  "
            f"{most(o['last_start'], o['calls']):>16} {most(o['last_end'], o['calls']):>16}"
        )
    return "\n".join(lines)


def format_table(summary: dict, ranks: int) -> str:
    lines = [
        f"# {ranks} trace file(s); times summed over ranks",
        f"{'collective':<24} {'calls':>7} {'total(ms)':>10} {'mean(us)':>9}  "
        + " ".join(f"{p + ' %':>14}" for p in PHASES),
    ]
    for name, s in sorted(summary.items(), key=lambda kv: -kv[1]["us"]):
        cells = []
        for p in PHASES:
            ph = s["phases"].get(p)
            cells.append(f"{100 * ph['us'] / s['us']:>13.0f}%" if ph and s["us"] > 0 else f"{'-':>14}")
        lines.append(
            f"{name:<24} {s['calls']:>7} {s['us'] / 1e3:>10.2f} {s['us'] / max(1, s['calls']):>9.1f}  "
            + " ".join(cells)
        )
    lines.append("")
    lines.append(f"{'collective':<24} {'phase':<12} {'busy(ms)':>9} {'bytes':>14} {'GB/s while busy':>16}")
    for name, s in sorted(summary.items(), key=lambda kv: -kv[1]["us"]):
        for p in PHASES:
            ph = s["phases"].get(p)
            if not ph:
                continue
            rate = ph["bytes"] / (ph["us"] * 1e3) if ph["us"] > 0 and ph["bytes"] else 0.0
            lines.append(f"{name:<24} {p:<12} {ph['us'] / 1e3:>9.2f} {ph['bytes']:>14} {rate:>16.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pyscalecomm.profile",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "traces",
        nargs="+",
        help="timeline files written with SCALECOMM_TIMELINE, or the value it was set to (every rank's file)",
    )
    p.add_argument(
        "--merge",
        metavar="FILE",
        default=None,
        help="also write every rank's events into one Chrome/Perfetto trace (default: none)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--skew", action="store_true", help="how far apart the ranks started and finished each collective"
    )
    add_version(p)
    args = p.parse_args(argv)
    files = []
    try:
        for path in args.traces:
            files += expand(path)
    except FileNotFoundError as e:
        print(f"pyscalecomm.profile: {e}", file=sys.stderr)
        return 2
    events = []
    for path in files:
        events.extend(load_events(path))
    if args.merge:
        merge(events, args.merge)
        print(f"# merged {len(files)} files ({len(events)} events) into {args.merge}", file=sys.stderr)
    if args.skew:
        sk = skew(events)
        print(json.dumps(sk, indent=1) if args.json else format_skew(sk))
        return 0
    summary = summarise(events)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(format_table(summary, len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
