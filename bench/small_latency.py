"""Latency of small synchronous collectives, every implementation in the same processes.

Run under mpirun so that Open MPI (mpi4py on the same buffers) takes part:

    mpirun --allow-run-as-root -n 2 --bind-to none python bench/small_latency.py

Rows (one per size, plus barrier): time per call in microseconds, the max over
ranks of each rank's mean over `--iters` back-to-back synchronous calls, as
the median over `--rounds` rounds with [min-max]. Implementations run
interleaved in every round (the VM is noisy: only ratios within one round
travel), in a balanced order (each column first once and right after every
other once per cycle of rounds), so that no column always follows the same
one. Columns:

- floor: `dist.all_reduce` of 8 bytes on torch's fake process group (world 1):
  torch's own dispatch, which no backend can beat through `dist.all_reduce`
  (below the table: `dist.barrier` on the same group, torch's own barrier
  dispatch, which allocates a tensor per call);
- scalecomm, gloo: `dist.all_reduce` (`dist.barrier`) on a group of that backend;
- direct: `pyscalecomm.allreduce` on the NumPy array over the tensor's memory
  (the direct API: no torch dispatch), what an mpi4py user calls instead of
  `comm.Allreduce`;
- floor+mpi: the floor's call and then `MPI_Allreduce` in one loop (barrier
  row: torch's barrier dispatch and then `MPI_Barrier`): what a backend with
  Open MPI's transport and no cost of its own would take through torch, both
  ranks paying torch's dispatch before they meet;
- mpi: `MPI_Allreduce` (`MPI_Barrier`) through mpi4py on the tensor's memory;
- deepspeed (when installed, `--deepspeed`): DeepSpeed's CPU shared-memory
  allreduce op called directly (no torch dispatch); floor+deepspeed: the
  floor's call and then that op, as floor+mpi;
- memcpy: one copy of the same size (the memory yardstick);
- scalecomm:ALGO (with `--algos ring,shared,...`): `dist.all_reduce` on a
  scalecomm group whose allreduce algorithm is fixed to ALGO (sizes an
  algorithm does not serve are left blank); ALGO+FIELD=VALUE+... also sets
  those `pyscalecomm.Options` fields on that group (e.g.
  `ring+mpi_zero_copy=0`).

Then the goal columns, each the median over rounds of the quantity computed
within one round (paired: a round's columns run back to back, so the VM's
drift between rounds cancels): (scalecomm - floor) / mpi; scalecomm - floor
(us); scalecomm - (floor+mpi) (us: what scalecomm adds beyond that ideal
backend); scalecomm / mpi; direct / mpi; with `--deepspeed` scalecomm /
(floor+deepspeed). Below the table, the barrier against the floor plus
`MPI_Barrier`, and against torch's barrier dispatch plus `MPI_Barrier`.
`--json FILE` writes one record per size with every round's times.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers the "fake" backend)

import pyscalecomm  # noqa: F401  (registers the backend; fills RANK... under mpirun)
from pyscalecomm.bench import parse_size, settle_auto
from pyscalecomm.bench.specs import deepspeed_op
from pyscalecomm.bench.timing import round_order


def _sizes(spec: str) -> list[int]:
    return [parse_size(s) for s in spec.split(",") if s.strip()]


def _paired(times: dict[str, list[float]], stat) -> float:
    """Median over rounds of `stat` applied to one round's times (columns of a
    round ran back to back, so their differences cancel the VM's drift)."""
    rounds = len(next(iter(times.values())))
    return statistics.median(stat({k: v[i] for k, v in times.items()}) for i in range(rounds))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,64,512,4K,16K,64K,256K,1M")
    ap.add_argument(
        "--iters", type=int, default=200, help="calls per implementation per round (fewer above 64 KiB)"
    )
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--deepspeed", action="store_true", help="add DeepSpeed's CPU shm allreduce")
    ap.add_argument("--json", help="write per-size records here (rank 0)")
    ap.add_argument(
        "--algos", default="", help="also time scalecomm groups fixed to these allreduce algorithms"
    )
    args = ap.parse_args()
    algos = [a for a in args.algos.split(",") if a]
    known = pyscalecomm.allreduce_algorithms()
    fields = {f.name for f in dataclasses.fields(pyscalecomm.Options)}
    options = {}
    for spec in algos:
        a, *settings = spec.split("+")
        if a not in known:
            ap.error(f"unknown allreduce algorithm {a!r}; choose from {', '.join(known)}")
        kv = dict(s.split("=", 1) for s in settings if "=" in s)
        for k in kv:
            if k not in fields:
                ap.error(f"{spec!r}: Options has no field {k!r}; choose from {', '.join(sorted(fields))}")
        options[spec] = pyscalecomm.Options(
            algorithm=a, **{k: int(v) if v.lstrip("-").isdigit() else v for k, v in kv.items()}
        )

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    dist.init_process_group("scalecomm")
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    fake = dist.new_subgroups(group_size=1, backend="fake")[0]
    ds = deepspeed_op(rank, n) if args.deepspeed else None

    def allreduce_on(group):
        def run(t, _a):
            dist.all_reduce(t, group=group)

        return run

    def direct(_t, a):
        pyscalecomm.allreduce(a)

    def mpi_allreduce(t, a):
        comm.Allreduce(MPI.IN_PLACE, a)

    def ds_allreduce(t, _a):
        torch.ops.deepspeed.inference_all_reduce_(t)

    def memcpy(t, _a, dst={}):  # noqa: B006  (one destination per size)
        d = dst.get(t.numel())
        if d is None:
            d = dst[t.numel()] = torch.empty_like(t)
        d.copy_(t)

    floor_t = torch.ones(2)

    def floor(_t, _a):
        dist.all_reduce(floor_t, group=fake)

    def floor_then_mpi(t, a):
        dist.all_reduce(floor_t, group=fake)
        comm.Allreduce(MPI.IN_PLACE, a)

    impls = {
        "floor": floor,
        "floor+mpi": floor_then_mpi,
        "scalecomm": allreduce_on(None),
        "direct": direct,
        "gloo": allreduce_on(gloo),
        "mpi": mpi_allreduce,
    }
    fixed = {a: dist.new_group(backend="scalecomm", pg_options=options[a]) for a in algos}
    for a, group in fixed.items():
        impls[f"scalecomm:{a}"] = allreduce_on(group)
    if ds is not None:
        impls["deepspeed"] = ds_allreduce

        def floor_then_ds(t, _a):
            dist.all_reduce(floor_t, group=fake)
            torch.ops.deepspeed.inference_all_reduce_(t)

        impls["floor+deepspeed"] = floor_then_ds
    impls["memcpy"] = memcpy
    barrier_impls = {
        "floor": floor,
        "scalecomm": lambda _t, _a: dist.barrier(),
        "gloo": lambda _t, _a: dist.barrier(group=gloo),
        "mpi": lambda _t, _a: comm.Barrier(),
        "floor+mpi": lambda _t, _a: (dist.barrier(group=fake), comm.Barrier()),
        # torch's own barrier dispatch (it allocates a tensor per call): the
        # floor no backend can beat through dist.barrier; printed below the table
        "barrier floor": lambda _t, _a: dist.barrier(group=fake),
    }

    rows = [(f"{size}", size, impls) for size in _sizes(args.sizes)] + [("barrier", 0, barrier_impls)]
    if rank == 0:
        print(f"# {n} ranks, torch {torch.__version__}, {MPI.Get_library_version().splitlines()[0]}")
        print(f"# us per synchronous call: median over {args.rounds} rounds [min-max], max over ranks")
        cols = list(impls)
        print(
            f"{'bytes':>8} "
            + " ".join(f"{c:>22}" for c in cols)
            + f" {'(sc-floor)/mpi':>15} {'sc-floor':>9} {'sc-(f+mpi)':>10} {'sc/mpi':>8} {'direct/mpi':>10}"
            + (f" {'sc/(f+ds)':>10}" if ds is not None else "")
        )
    records = []
    for label, size, table in rows:
        count = max(1, size // 4)
        t = torch.ones(count, dtype=torch.float32)
        a = t.numpy()
        iters = args.iters if size <= (64 << 10) else max(20, args.iters // 4)
        table = {
            k: fn
            for k, fn in table.items()
            if not k.startswith("scalecomm:")
            or k[10:].split("+")[0]
            in fixed[k[10:]]._get_backend(torch.device("cpu")).allreduce_algorithms(size or 4)
        }
        if "scalecomm" in table:  # auto's online choice (SCALECOMM_AUTOTUNE=online) settles before the rounds
            run = functools.partial(table["scalecomm"], t, a)
            settle_auto(run, dist.group.WORLD._get_backend(t.device), count * 4)
        times = {k: [] for k in table}
        for round_ in range(args.rounds):
            for name, fn in round_order(table.items(), round_):
                for _ in range(5):
                    fn(t, a)
                comm.Barrier()
                start = time.perf_counter()
                for _ in range(iters):
                    fn(t, a)
                mine = (time.perf_counter() - start) / iters
                times[name].append(comm.allreduce(mine, op=MPI.MAX) * 1e6)
                t.fill_(1.0)
        if rank == 0:
            med = {k: statistics.median(v) for k, v in times.items()}
            cells = " ".join(
                f"{med[k]:>8.1f} [{min(times[k]):>5.1f}-{max(times[k]):>6.1f}]" if k in med else f"{'':>22}"
                for k in impls
            )
            goals = {
                "over": _paired(times, lambda r: (r["scalecomm"] - r["floor"]) / r["mpi"]),
                "above": _paired(times, lambda r: r["scalecomm"] - r["floor"]),
                "beyond": _paired(times, lambda r: r["scalecomm"] - r["floor+mpi"]),
                "ratio": _paired(times, lambda r: r["scalecomm"] / r["mpi"]),
            }
            if "direct" in times:
                goals["direct"] = _paired(times, lambda r: r["direct"] / r["mpi"])
            if "floor+deepspeed" in times:
                goals["floor_ds"] = _paired(times, lambda r: r["scalecomm"] / r["floor+deepspeed"])
            print(
                f"{label:>8} {cells} {goals['over']:>15.2f} {goals['above']:>9.1f} {goals['beyond']:>10.1f} "
                f"{goals['ratio']:>8.2f}"
                + (f" {goals['direct']:>10.2f}" if "direct" in goals else "")
                + (f" {goals['floor_ds']:>10.2f}" if "floor_ds" in goals else ""),
                flush=True,
            )
            records.append(
                {
                    "bytes": size,
                    "what": "barrier" if label == "barrier" else "allreduce",
                    "us": times,
                    "paired_medians": goals,
                }
            )
            if label == "barrier":
                bf = med["barrier floor"]
                print(
                    f"# barrier floor (dist.barrier on the fake group): {bf:.1f} "
                    f"[{min(times['barrier floor']):.1f}-{max(times['barrier floor']):.1f}]; "
                    "scalecomm - floor - mpi (paired median) = "
                    f"{_paired(times, lambda r: r['scalecomm'] - r['floor'] - r['mpi']):.1f} us; "
                    "scalecomm - barrier floor - mpi = "
                    f"{_paired(times, lambda r: r['scalecomm'] - r['barrier floor'] - r['mpi']):.1f} us",
                    flush=True,
                )
    tuning = dist.group.WORLD._get_backend(torch.device("cpu")).tuning()
    if rank == 0 and tuning:
        picks = ", ".join(
            f"<={b['bytes']} B {b['algorithm'] or '?'} ({b['source'] or b['phase']})" for b in tuning
        )
        print(f"# auto's online choices: {picks}", flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
