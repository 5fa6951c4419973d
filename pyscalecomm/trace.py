"""Merge the flight-recorder dumps of every rank into one report.

With ``SCALECOMM_TRACE_DIR=DIR`` every rank writes
``DIR/scalecomm-trace-<group>-rank<r>.json`` when a collective times out or
fails (and when another rank's timeout asks where it is). This tool reads
them all and prints, per group, the desync verdict (which rank lags and where
the others wait) and each rank's last calls side by side::

    python -m pyscalecomm.trace DIR [--last 8] [--json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections import defaultdict

from pyscalecomm._cli import HelpFormatter, add_version


def load(directory: str) -> dict[str, dict[int, dict]]:
    """Dumps by group name, then rank."""
    groups: dict[str, dict[int, dict]] = defaultdict(dict)
    for path in sorted(glob.glob(os.path.join(directory, "scalecomm-trace-*-rank*.json"))):
        with open(path) as f:
            dump = json.load(f)
        groups[dump["group"]][int(dump["rank"])] = dump
    return dict(groups)


def report(group: str, dumps: dict[int, dict], last: int) -> dict:
    from pyscalecomm import _C

    size = max(d["size"] for d in dumps.values())
    verdict = _C.desync_report(size, {r: d["position"] for r, d in dumps.items()})
    ranks = []
    for r in range(size):
        d = dumps.get(r)
        ranks.append(
            {
                "rank": r,
                "dumped": d is not None,
                "why": d["why"] if d else "",
                "last": d["entries"][-last:] if d else [],
            }
        )
    return {"group": group, "size": size, "verdict": verdict, "ranks": ranks}


def _print(rep: dict) -> None:
    print(f"# group '{rep['group']}' ({rep['size']} ranks)")
    print(rep["verdict"])
    for r in rep["ranks"]:
        if not r["dumped"]:
            print(f"\nrank {r['rank']}: no dump")
            continue
        print(f"\nrank {r['rank']}: {r['why'].splitlines()[0] if r['why'] else ''}")
        print(f"  {'seq':>6} {'call':<16} {'algorithm':<12} {'bytes':>12} {'state':<8} {'took s':>8}  error")
        for e in r["last"]:
            ran = e["ended_s"] >= 0 and e["started_s"] >= 0
            took = e["ended_s"] - e["started_s"] if ran else float("nan")
            print(
                f"  {e['seq']:>6} {e['name']:<16} {e['algorithm']:<12} {e['bytes']:>12} {e['state']:<8} "
                f"{took:>8.3f}  {e['error'].splitlines()[0] if e['error'] else ''}"
            )
    print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m pyscalecomm.trace", description=__doc__.splitlines()[0], formatter_class=HelpFormatter
    )
    ap.add_argument("directory", help="the SCALECOMM_TRACE_DIR the ranks wrote to")
    ap.add_argument("--last", type=int, default=8, help="calls per rank to show (default 8)")
    ap.add_argument("--json", action="store_true", help="print the merged report as JSON")
    add_version(ap)
    args = ap.parse_args(argv)
    groups = load(args.directory)
    if not groups:
        print(f"no scalecomm-trace-*-rank*.json in {args.directory}", file=sys.stderr)
        return 1
    reports = [report(g, dumps, args.last) for g, dumps in sorted(groups.items())]
    if args.json:
        print(json.dumps(reports, indent=2))
    else:
        for rep in reports:
            _print(rep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
