"""Measure every allreduce algorithm on this group and write a tuning file for ``auto``.

    python -m pyscalecomm.tune --nproc 4 -b 8 -e 64M -o scalecomm-tuning.txt
    torchrun --nproc-per-node 4 -m pyscalecomm.tune -o scalecomm-tuning.txt
    SCALECOMM_TUNING_FILE=scalecomm-tuning.txt python train.py   # auto uses it

For each size (interleaved: every algorithm is timed once per round, ``--rounds``
rounds, the fastest round kept, so drift on a busy machine hits all alike) the
winner goes into the file as ``allreduce <bytes> <algorithm>``; ``auto`` then
picks the winner of the nearest measured size (in log2 of bytes) and falls
back to the cost model only for a world size the file was not measured at.
The file also records the probed alpha and beta, so groups created with it
skip the probe. The table printed here has one column per algorithm (time in
us) and the winner.
"""

from __future__ import annotations

import argparse
import sys

from pyscalecomm.bench import parse_size, sizes
from pyscalecomm.bench_ops import make_case, measure, torch_runner


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m pyscalecomm.tune",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-b", "--minbytes", default="8")
    p.add_argument("-e", "--maxbytes", default="64M")
    p.add_argument("-f", "--stepfactor", type=int, default=4)
    p.add_argument("-n", "--iters", type=int, default=10, help="timed allreduces per measurement")
    p.add_argument("-w", "--warmup_iters", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the fastest is kept")
    p.add_argument(
        "--algos", default="ring,rhd,tree,direct,hier", help="candidates (hier only on several hosts)"
    )
    p.add_argument("-o", "--output", default="scalecomm-tuning.txt")
    p.add_argument("--nproc", type=int, default=0, help="spawn this many local ranks (no launcher needed)")
    return p.parse_args(argv)


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
    algos = [a for a in args.algos.split(",") if a and (a != "hier" or len(set(hosts)) > 1)]
    groups = {
        a: dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(algorithm=a)) for a in algos
    }
    size_list = sizes(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor, 0)
    if rank == 0:
        print(
            f"# scalecomm tune: world {n}, {len(set(hosts))} host(s), "
            f"rounds {args.rounds}, iters {args.iters}"
        )
        print(
            f"{'size (B)':>12} " + " ".join(f"{a + ' (us)':>12}" for a in algos) + f" {'winner':>8}",
            flush=True,
        )
    winners = []
    for size in size_list:
        count = max(1, size // 4)
        case = make_case("allreduce", count, torch.float32, rank, n, inplace=True)
        best = {a: float("inf") for a in algos}
        for _ in range(args.rounds):
            for a in algos:
                run_once = torch_runner(case, groups[a], dist.ReduceOp.SUM)
                stats, _, _ = measure(run_once, case, timing, args.iters, args.warmup_iters, check=False)
                best[a] = min(best[a], stats["max"])
        winner = min(algos, key=lambda a: best[a])
        winners.append((count * 4, winner))
        if rank == 0:
            print(
                f"{count * 4:>12} " + " ".join(f"{best[a] * 1e6:>12.1f}" for a in algos) + f" {winner:>8}",
                flush=True,
            )
    if rank == 0:
        costs = world.cost_params
        with open(args.output, "w") as f:
            f.write(
                f"# scalecomm tuning file: python -m pyscalecomm.tune, {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
            )
            f.write(f"world {n}\nalpha {costs['alpha']:.6g}\nbeta {costs['beta']:.6g}\n")
            for nbytes, winner in winners:
                f.write(f"allreduce {nbytes} {winner}\n")
        print(
            f"# wrote {args.output}; use it with SCALECOMM_TUNING_FILE={args.output} "
            "(or Options(tuning_file=...))"
        )
    dist.destroy_process_group()


def main(argv=None) -> int:
    from pyscalecomm.launch import main_with_launcher

    return main_with_launcher("pyscalecomm.tune", parse_args(argv), argv, run)


if __name__ == "__main__":
    sys.exit(main())
