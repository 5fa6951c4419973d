"""Markdown table of auto against every fixed allreduce algorithm, from bench --json lines.

    python -m pyscalecomm.bench --nproc 3 -b 8 -e 256M -f 32 --rounds 5 --min-time 0.003 \\
        --algos ring,rhd,tree,dbtree,direct,shared,auto --baselines none --json b3.jsonl
    python bench/auto_table.py b3.jsonl

Per size (in-place rows): each algorithm's median time over the rounds (us),
the best fixed algorithm by that median, and auto's median over the best's
(the goal's ratio) with the best's own range over rounds (its noise band).
A row is "within" when that ratio is at most 1.05, or auto's median lies
inside the best's band (then the band is wider than 5%). "ran" is what auto
ran (benches that record it); its choice counts as right when it is the best
or its own column's median lies inside the best's band: on an oversubscribed
machine auto's column and the same algorithm's fixed column can differ by 2x,
which the first rule charges to auto and this one does not.
"""

import json
import statistics
import sys
from collections import defaultdict


def main(path: str) -> int:
    rows = defaultdict(dict)
    ran = {}
    world = None
    for line in open(path):
        r = json.loads(line)
        if r.get("collective") != "allreduce" or not r.get("inplace") or r.get("backend") != "scalecomm":
            continue
        world = r["world_size"]
        rows[r["bytes"]][r["algorithm"]] = r["time_us_rounds"]
        if r["algorithm"] == "auto" and r.get("ran"):
            ran[r["bytes"]] = r["ran"]
    algos = [
        a for a in ("ring", "rhd", "tree", "dbtree", "direct", "shared") if any(a in v for v in rows.values())
    ]
    print(f"world {world}")
    print("| bytes | " + " | ".join(algos) + " | auto | ran | best fixed [band] | auto/best | | choice |")
    print("| ---: | " + " | ".join("---:" for _ in algos) + " | ---: | --- | --- | ---: | --- | --- |")
    within = right = 0
    for nbytes in sorted(rows):
        v = rows[nbytes]
        meds = {a: statistics.median(v[a]) for a in algos if v.get(a)}
        best = min(meds, key=meds.get)
        auto = statistics.median(v["auto"])
        ratio = auto / meds[best]
        ok = ratio <= 1.05 or auto <= max(v[best])
        within += ok
        cells = " | ".join(f"{meds[a]:.1f}" if a in meds else "" for a in algos)
        r = ran.get(nbytes, "?")
        inside = r == best or meds.get(r, float("inf")) <= max(v[best])
        choice = "" if r == "?" else "right" if inside else "wrong"
        right += choice == "right"
        print(
            f"| {nbytes} | {cells} | {auto:.1f} | {r} | {best} [{min(v[best]):.1f}-{max(v[best]):.1f}] | "
            f"{ratio:.2f}x | {'within' if ok else 'OFF'} | {choice} |"
        )
    print(f"\nwithin 5% or the best's band: {within} of {len(rows)} sizes")
    if ran:
        print(f"auto ran the best or one inside its band: {right} of {len(ran)} sizes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
