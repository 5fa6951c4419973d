"""auto's measured allreduce winners: show the tuning cache, or measure a table offline.

    python -m pyscalecomm.tune --show                 # this machine's caches
    python -m pyscalecomm.tune --show FILE            # one file
    python -m pyscalecomm.tune --fit [FILE ...]       # re-fit the cost model to what was measured
    python -m pyscalecomm.tune --nproc 4 -b 8 -e 64M --out scalecomm-tuning.txt
    torchrun --nproc-per-node 4 -m pyscalecomm.tune --out scalecomm-tuning.txt
    SCALECOMM_TUNING_FILE=scalecomm-tuning.txt python train.py   # auto starts from it

``auto`` measures online (unless SCALECOMM_AUTOTUNE=model): the first calls of each size bucket try
the algorithms the cost model ranks close, and the winners go into a tuning
cache (one file per machine, layout and version under ~/.cache/scalecomm,
or SCALECOMM_TUNING_FILE) that the next run starts from. ``--show`` prints
those files: per bucket the winner with its median time and interval (the
maximum over ranks per call) and what the other candidates measured.
``--fit`` re-fits the cache's cost model (alpha, beta, per-message
overhead, per-byte reduction, the shared windows' flag round and a per-call
constant) to every candidate's measured median, prints the median error
before and after, and stores the fitted model in the cache: the next group
ranks its candidates with it, and ``python -m pyscalecomm.simulate
--tuning-file`` prices with it.

The offline sweep times, at every size, the algorithms auto weighs there
for this group (or ``--algos``), interleaved (every algorithm once per
round, ``--rounds`` rounds, so drift on a busy machine hits all alike), and
compares their median rounds. A size has a winner only where the fastest
algorithm's slowest round beats the runner-up's fastest round; otherwise it
is a tie (the table says which two, the file records it as a comment) and
auto keeps measuring that size online. The winners go into a tuning file in
the cache's format, keyed to this group's layout, with the probed alpha and
beta (groups created with it skip the probe). Sizes with a winner are not
measured again online; under SCALECOMM_AUTOTUNE=model ``auto`` takes the
winner of the nearest measured size.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

from pyscalecomm._cli import HelpFormatter, add_nproc, add_version
from pyscalecomm.bench import parse_sizes, sizes
from pyscalecomm.bench.specs import make_case, torch_runner
from pyscalecomm.bench.timing import measure


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m pyscalecomm.tune",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("-b", "--minbytes", default="8", help="smallest size in bytes (8, 1K, 1M)")
    p.add_argument("-e", "--maxbytes", default="64M", help="largest size in bytes")
    p.add_argument(
        "-f", "--stepfactor", type=int, default=4, help="multiply the size by this from one size to the next"
    )
    p.add_argument("-n", "--iters", type=int, default=10, help="timed allreduces per measurement")
    p.add_argument(
        "-w", "--warmup_iters", type=int, default=3, help="untimed allreduces before each measurement"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="interleaved rounds; medians compared, a winner only beyond both algorithms' spreads",
    )
    p.add_argument(
        "--algos",
        default="auto",
        help="candidates, comma separated; auto: at each size the algorithms auto weighs online for this "
        "group (those that serve the size here; hier only where a host holds several ranks)",
    )
    p.add_argument(
        "--out", "--output", dest="output", default="scalecomm-tuning.txt", help="the tuning file to write"
    )
    add_nproc(p)
    p.add_argument(
        "--show",
        nargs="*",
        metavar="FILE",
        help="print tuning caches (default: every file of this machine's cache directory) and exit",
    )
    p.add_argument(
        "--fit",
        nargs="*",
        metavar="FILE",
        help="re-fit the cost model of tuning caches (default: this machine's) "
        "to their measurements and exit",
    )
    add_version(p)
    args = p.parse_args(argv)
    # The candidates as a list: ["auto"], or algorithms tune can write as winners.
    algos = [a for a in args.algos.split(",") if a]
    if algos != ["auto"]:
        from pyscalecomm import allreduce_algorithms

        known = allreduce_algorithms()
        unknown = [a for a in algos if a not in known and a != "auto"]
        if unknown:
            what = f"unknown algorithm {', '.join(unknown)}"
        elif "auto" in algos:
            what = "auto in a list"
        elif not algos:
            what = "empty"
        else:
            what = ""
        if what:
            p.error(f"--algos {args.algos!r}: {what}; give auto alone, or some of {','.join(known)}")
    args.algos = algos
    parse_sizes(p, args, minbytes="-b", maxbytes="-e")
    return args


def fit(paths: list[str], out=sys.stdout) -> int:
    """Re-fits each cache's model to its measurements and stores it; 1 when there is none."""
    from pyscalecomm import _C

    paths = paths or sorted(glob.glob(os.path.join(cache_dir(), "tuning-*.txt")))
    if not paths:
        print(f"no tuning caches in {cache_dir()} (auto writes one as it measures)", file=out)
        return 1
    for path in paths:
        try:
            r = _C.fit_tuning_file(path, write=True)
        except ValueError as e:
            print(f"# {path}: {e}", file=out)
            return 1
        # The model's terms (every key but the fit's three), the per-call term
        # first; seconds per byte (beta, gamma) as they are, the rest in us.
        fit_stats = ("samples", "median_error_before", "median_error_after")
        model = {k: v for k, v in r.items() if k not in fit_stats}
        terms = ", ".join(
            f"{k} {v:.3g}" if k.endswith("beta") or k == "gamma" else f"{k} {_us(v)} us"
            for k, v in sorted(model.items(), key=lambda kv: kv[0] != "call")
            if v >= 0
        )
        print(
            f"# {path}: {r['samples']} measured medians; median |error| "
            f"{r['median_error_before'] * 100:.0f}% before, "
            f"{r['median_error_after'] * 100:.0f}% after the fit",
            file=out,
        )
        print(f"# fitted model (stored): {terms}", file=out)
    return 0


def decide(rounds: dict[str, list[float]]) -> tuple[str | None, str]:
    """The winner of one size from each algorithm's per-round times, and what
    the table shows: the algorithm with the lowest median round wins only if
    its slowest round is faster than the runner-up's fastest; otherwise
    (None, "tie:<best>,<runner-up>"), which auto measures online."""
    import statistics

    ranked = sorted(rounds, key=lambda a: statistics.median(rounds[a]))
    if len(ranked) == 1:
        return ranked[0], ranked[0]
    best, second = ranked[0], ranked[1]
    if max(rounds[best]) < min(rounds[second]):
        return best, best
    return None, f"tie:{best},{second}"


def run(args) -> None:
    import time

    import torch
    import torch.distributed as dist

    import pyscalecomm

    dist.init_process_group("scalecomm", pg_options=pyscalecomm.Options(algorithm="auto"))
    rank, n = dist.get_rank(), dist.get_world_size()
    world = dist.group.WORLD._get_backend(torch.device("cpu"))
    timing = dist.new_group(backend="gloo")
    hosts = [None] * n
    dist.all_gather_object(hosts, pyscalecomm._C.host_identity(), group=timing)
    size_list = sizes(args.minbytes, args.maxbytes, args.stepfactor, 0)
    # Each size's candidates; the same on every rank (the group's layout).
    per_size = {
        size: world.auto_candidates(max(1, size // 4) * 4) if args.algos == ["auto"] else args.algos
        for size in size_list
    }
    algos = list(dict.fromkeys(a for size in size_list for a in per_size[size]))
    groups = {
        a: dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(algorithm=a)) for a in algos
    }
    if rank == 0:
        print(
            f"# scalecomm tune: world {n}, {len(set(hosts))} host(s), "
            f"rounds {args.rounds} (cells: the median round, us), iters {args.iters}"
        )
        if args.rounds < 3:
            print(f"# only {args.rounds} round(s): any difference decides; use --rounds 5 or more")
        print(
            f"{'size (B)':>12} " + " ".join(f"{a + ' (us)':>12}" for a in algos) + f" {'winner':>8}",
            flush=True,
        )
    winners = []
    for size in size_list:
        count = max(1, size // 4)
        case = make_case("allreduce", count, torch.float32, rank, n, inplace=True)
        here = per_size[size]
        rounds: dict[str, list[float]] = {a: [] for a in here}
        for _ in range(args.rounds):
            for a in here:
                run_once = torch_runner(case, groups[a], dist.ReduceOp.SUM)
                stats, _, _ = measure(run_once, case, timing, args.iters, args.warmup_iters, check=False)
                rounds[a].append(stats["max"])
        winner, shown = decide(rounds)
        winners.append((count * 4, winner, shown))
        if rank == 0:
            import statistics

            cells = [
                f"{statistics.median(rounds[a]) * 1e6:>12.1f}" if a in rounds else f"{'-':>12}" for a in algos
            ]
            print(f"{count * 4:>12} " + " ".join(cells) + f" {shown:>8}", flush=True)
    if rank == 0:
        costs = world.cost_params
        with open(args.output, "w") as f:
            f.write(
                f"# scalecomm tuning file: python -m pyscalecomm.tune, {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
            )
            f.write(f"key {world.tuning_key}\n")
            f.write(f"world {n}\nalpha {costs['alpha']:.6g}\nbeta {costs['beta']:.6g}\n")
            for nbytes, winner, shown in winners:
                if winner:
                    f.write(f"allreduce {nbytes} {winner}\n")
                else:  # no line: auto measures this size online
                    f.write(f"# allreduce {nbytes} {shown} within each other's rounds: measured online\n")
        print(
            f"# wrote {args.output}; use it with SCALECOMM_TUNING_FILE={args.output} "
            "(or Options(tuning_file=...))"
        )
    dist.destroy_process_group()


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "scalecomm")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}" if seconds < 1e-2 else f"{seconds * 1e6:.0f}"


def show(paths: list[str], out=sys.stdout) -> int:
    """Prints each tuning cache as a table; 1 when there is none to show."""
    if not paths:
        d = cache_dir()
        paths = sorted(glob.glob(os.path.join(d, "tuning-*.txt")))
        if not paths:
            print(f"no tuning caches in {d} (auto writes one as it measures)", file=out)
            return 1
    for path in paths:
        key, rows = "", []
        with open(path) as f:
            for line in f:
                tie = line.split()
                if tie[:2] == ["#", "allreduce"] and len(tie) > 3 and tie[3].startswith("tie:"):
                    rows.append(tie[2:4])  # tune found no winner: auto measures this size online
                    continue
                words = line.split("#", 1)[0].split()
                if words[:1] == ["key"]:
                    key = line.split(None, 1)[1].strip()
                elif words[:1] == ["allreduce"]:
                    rows.append(words[1:])
        print(f"# {path}", file=out)
        print(f"# measured for: {key or '(any layout)'}", file=out)
        head = f"{'bytes <=':>12} {'winner':>9} {'median us':>10} {'interval us':>18}"
        print(head + "  others (median us)", file=out)
        for r in rows:
            nbytes, algo = r[0], r[1]
            if len(r) >= 5:
                med, lo, hi = (float(x) for x in r[2:5])
                others = [x.split("=") for x in r[5:] if not x.startswith("size=")]
                rest = ", ".join(f"{a} {_us(float(t))}" for a, t in others if a != algo)
                band = _us(lo) + "-" + _us(hi)
                print(f"{nbytes:>12} {algo:>9} {_us(med):>10} {band:>18}  {rest}", file=out)
            elif algo.startswith("tie:"):
                note = "(no winner beyond the rounds' spread: auto measures this size online)"
                print(f"{nbytes:>12} {algo:>9} {'':>10} {'':>18}  {note}", file=out)
            else:
                note = "(no times: written offline or by hand)"
                print(f"{nbytes:>12} {algo:>9} {'':>10} {'':>18}  {note}", file=out)
    return 0


def main(argv=None) -> int:
    from pyscalecomm.launch import main_with_launcher

    args = parse_args(argv)
    if args.show is not None:
        return show(args.show)
    if args.fit is not None:
        return fit(args.fit)
    return main_with_launcher("pyscalecomm.tune", args, argv, run)


if __name__ == "__main__":
    sys.exit(main())
