"""nccl-tests-style collective benchmark: scalecomm's algorithms and baselines in one run.

Run on one machine:    python -m pyscalecomm.bench --nproc 2 -b 8 -e 256M
Under a launcher:      torchrun --nproc-per-node 4 -m pyscalecomm.bench -b 1M -e 64M
                       mpirun -n 4 python -m pyscalecomm.bench -b 1M -e 64M --baselines gloo,mpi
Every collective:      ... --collectives all   (allreduce broadcast reduce allgather reduce_scatter alltoall)
Parameter server:      ... --collectives ps      (pushes + pulls per second over 1..world server shards)

One row per size and implementation (a scalecomm algorithm from --algos, or a
baseline from --baselines), with nccl-tests' columns for out-of-place and
in-place: time (us per call; -a picks the statistic across ranks, default the
average), algbw = size / time, busbw = algbw x the collective's factor
(allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n; broadcast,
reduce 1), #wrong (elements differing from the closed-form result; -c 0 skips
the check). Sizes are of the whole buffer, as in nccl-tests (allgather: the
gathered output). Then: busbw relative to the first baseline, and which
implementation won each size. auto's row says what it ran and its time
against the fixed algorithm with the lowest median round, paired by round:
``auto->rhd 1.01x of rhd [0.97-1.06]`` is the median ratio and its range over
rounds (auto's online choice settles on each size before its rounds start).
Each collective ends with nccl-tests' "Avg bus
bandwidth" per implementation, and the run with the count of wrong values
(exit status 1 if any). ``--json`` appends one JSON line per measurement with
the full configuration and min/avg/max time across ranks; ``--plot`` draws
busbw against size per implementation (matplotlib).

``--collectives ps`` measures the parameter server (pyscalecomm.ps) instead
of a collective: per size (the model's gradient, in 16 keys) and server count
S = 1 .. world, every rank pushes its gradient and pulls the parameters in
async mode; the row gives the slowest rank's time per step, the requests
(pushes + pulls) and bytes the servers handle per second together, and the
speedup over one server; over scalecomm and each CPU baseline backend.

Baselines: gloo (torch's CPU backend) and mpi (MPI's own collectives through
mpi4py on the same buffers; needs mpirun). The timing runs back-to-back calls
between barriers on a separate gloo group; --rounds R times every
implementation R times round-robin per size; the table keeps each one's fastest
round, the JSON lines every round (time_us_rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from pyscalecomm import _C
from pyscalecomm._cli import HelpFormatter, add_nproc, add_version
from pyscalecomm.bench_ops import (
    COLLECTIVES,
    algorithm_applies,
    busbw_factor,
    element_count,
    known_algorithms,
    make_case,
    measure,
    mpi_runner,
    ps_step_seconds,
    relative_error,
    torch_runner,
    wire_bytes,
)

_DTYPES = {
    "float": "float32",
    "float32": "float32",
    "double": "float64",
    "float64": "float64",
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "int32": "int32",
    "int64": "int64",
    "int8": "int8",
    "uint8": "uint8",
}
_OPS = ["sum", "prod", "min", "max", "avg"]
_STATS = {0: "rank0", 1: "avg", 2: "min", 3: "max"}
_REDUCING = ("allreduce", "reduce", "reduce_scatter")


def parse_size(text: str) -> int:
    """'8', '64K', '1KB', '1MiB', '2G' -> bytes (1024-based; the settings' parser)."""
    try:
        return _C.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parse_sizes(parser, args, **flags: str) -> None:
    """Replaces each size option (dest=flag) of ``args`` by its bytes, or
    exits through ``parser`` naming the flag: in the parent, before ranks start."""
    for dest, flag in flags.items():
        try:
            setattr(args, dest, parse_size(getattr(args, dest)))
        except argparse.ArgumentTypeError as e:
            parser.error(f"{flag}: {e}")


def sizes(begin: int, end: int, factor: int, step: int) -> list[int]:
    out, s = [], begin
    while s <= end:
        out.append(s)
        s = s + step if step else s * factor
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m pyscalecomm.bench",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("-b", "--minbytes", default="8", help="smallest size (e.g. 8, 1K, 1M)")
    p.add_argument("-e", "--maxbytes", default="64M", help="largest size")
    p.add_argument("-f", "--stepfactor", type=int, default=4, help="multiply size by this")
    p.add_argument("-i", "--stepbytes", default="0", help="add this instead of multiplying")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per size")
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-c", "--check", type=int, default=1, help="check results (1) or not (0)")
    p.add_argument("-d", "--datatype", default="float", choices=sorted(_DTYPES))
    p.add_argument("-o", "--op", default="sum", choices=_OPS)
    p.add_argument("-r", "--root", type=int, default=0, help="root of broadcast and reduce")
    p.add_argument(
        "-a",
        "--average",
        type=int,
        default=1,
        choices=sorted(_STATS),
        help="time across ranks: 0 rank 0, 1 avg, 2 min, 3 max",
    )
    p.add_argument(
        "--collectives",
        default="allreduce",
        help=f"comma list or 'all': {', '.join(COLLECTIVES)}; or ps (the parameter server)",
    )
    p.add_argument(
        "--algos",
        default="",
        help="comma list of scalecomm algorithms, one row each where the collective has it "
        "(e.g. ring,rhd,tree,direct,ps,hier,auto,mpi); empty: the default selection",
    )
    p.add_argument(
        "--baselines",
        default="",
        help="comma list of gloo, mpi (mpi needs mpirun), nccl (CUDA); 'none'. "
        "Default: gloo on cpu, nccl on cuda",
    )
    p.add_argument(
        "--compress",
        default="",
        help="comma list of codecs for extra allreduce rows, e.g. topk:0.01,qsgd:8,sign,powersgd:4 "
        "(in place; #wrong shows the relative error of the lossy sum; wire bytes in the JSON)",
    )
    p.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="where the buffers live; cuda puts each rank on GPU LOCAL_RANK "
        "(scalecomm over NCCL; --algos ring,nccl compares ours with NCCL's)",
    )
    p.add_argument("--backends", default="", help=argparse.SUPPRESS)  # old spelling: scalecomm,gloo
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="time every implementation this many times, round-robin; keep the fastest (for noisy machines)",
    )
    add_nproc(p)
    p.add_argument("--json", default="", help="append one JSON line per measurement to this file")
    p.add_argument("--plot", default="", help="write busbw against size per implementation to this PNG")
    p.add_argument(
        "--progress", action="store_true", help="report progress on stderr (default: when a terminal)"
    )
    p.add_argument(
        "--min-time",
        type=float,
        default=0.0,
        help="raise iterations per size until a size's timed loop lasts this many seconds",
    )
    add_version(p)
    args = p.parse_args(argv)
    if args.backends:
        args.baselines = ",".join(b for b in args.backends.split(",") if b != "scalecomm") or "none"
    args.collectives = (
        COLLECTIVES if args.collectives == "all" else [c for c in args.collectives.split(",") if c]
    )
    for c in args.collectives:
        if c not in COLLECTIVES and c != "ps":
            p.error(f"unknown collective {c!r}; choose from {', '.join(COLLECTIVES)}, 'all' or ps")
    parse_sizes(p, args, minbytes="-b", maxbytes="-e", stepbytes="-i")
    known = known_algorithms()
    for a in (a for a in args.algos.split(",") if a):
        if a not in known:
            p.error(f"unknown algorithm {a!r} in --algos; choose from {', '.join(known)}")
    if "ps" in args.collectives and args.device != "cpu":
        p.error("--collectives ps runs on the CPU (the parameter server holds CPU tensors)")
    if not args.baselines:
        args.baselines = "nccl" if args.device == "cuda" else "gloo"
    args.baselines = [b for b in args.baselines.split(",") if b and b != "none"]
    for b in args.baselines:
        if b not in ("gloo", "mpi", "nccl"):
            p.error(f"unknown baseline {b!r}; choose gloo, mpi, nccl or none")
    if "nccl" in args.baselines and args.device != "cuda":
        p.error("--baselines nccl needs --device cuda")
    return args


class Impl:
    """One row label: a scalecomm algorithm (group) or a baseline (gloo group, MPI communicator)."""

    def __init__(self, label, kind, handle, algo=""):
        self.label, self.kind, self.handle, self.algo = label, kind, handle, algo


def _implementations(args, dist, pyscalecomm):
    """{collective: [Impl]}, creating every group up front in the same order on every rank."""
    dist.init_process_group("scalecomm")
    n = dist.get_world_size()
    timing = dist.new_group(backend="gloo")
    groups = {"": dist.group.WORLD}
    algos = [a for a in args.algos.split(",") if a]
    mpi_comm = None
    if "mpi" in args.baselines:
        try:
            from mpi4py import MPI
        except ImportError:
            raise SystemExit("--baselines mpi needs mpi4py (pip install mpi4py) and mpirun") from None
        mpi_comm = MPI.COMM_WORLD
        if mpi_comm.Get_size() != n or mpi_comm.Get_rank() != dist.get_rank():
            raise SystemExit(
                "--baselines mpi needs the ranks started by mpirun (MPI's world is not this group)"
            )
    gloo = timing if "gloo" in args.baselines else None
    nccl = dist.new_group(backend="nccl") if "nccl" in args.baselines else None
    table = {}
    for c in args.collectives:
        if c == "ps":
            continue  # its own groups, per measurement (run_ps)
        impls = []
        wanted = [a for a in algos if algorithm_applies(c, a)]
        if not any(a != "mpi" for a in wanted):
            wanted = ["", *wanted]  # always one row of scalecomm's own algorithm
        for a in wanted:
            spec = f"{c}:{a}" if a else ""  # "" = the default group (every collective on its default)
            if spec not in groups:
                groups[spec] = dist.new_group(
                    backend="scalecomm", pg_options=pyscalecomm.Options(algorithm=spec)
                )
            impls.append(Impl(f"scalecomm:{a}" if a else "scalecomm", "scalecomm", groups[spec], a))
        if gloo is not None:
            impls.append(Impl("gloo", "gloo", gloo))
        if c == "allreduce":
            for spec in [x for x in args.compress.split(",") if x]:
                impls.append(Impl(f"scalecomm:{spec}", "compress", dist.group.WORLD, spec))
        if nccl is not None:
            impls.append(Impl("nccl", "nccl", nccl))
        if mpi_comm is not None:
            impls.append(Impl("mpi", "mpi", mpi_comm))
        table[c] = impls
    return table, timing


def _runner(impl, case, args, dist):
    if impl.kind == "compress":
        if not case.inplace or args.op not in ("sum", "avg"):
            return None
        import pyscalecomm

        key = f"bench:{impl.algo}:{case.count}"
        return lambda: pyscalecomm.allreduce(case.inp, impl.algo, op=args.op, key=key, error_feedback=False)
    if impl.kind == "mpi":
        return mpi_runner(case, impl.handle, args.op)
    fixed = impl.algo not in ("", "auto", "mpi", "nccl")
    if impl.kind == "scalecomm" and case.collective == "allreduce" and fixed:
        be = impl.handle._get_backend(case.inp.device)
        if impl.algo not in be.allreduce_algorithms(case.count * case.inp.element_size()):
            return None  # e.g. pairwise above 4032 bytes, shared above its window
    if impl.kind == "gloo" and args.op == "avg" and case.collective in _REDUCING:
        return None  # gloo has no AVG
    op = {
        "sum": dist.ReduceOp.SUM,
        "prod": dist.ReduceOp.PRODUCT,
        "min": dist.ReduceOp.MIN,
        "max": dist.ReduceOp.MAX,
        "avg": dist.ReduceOp.AVG,
    }[args.op]
    return torch_runner(case, impl.handle, op)


def settle_auto(fn, backend, nbytes: int, timing, limit: int = 4000) -> None:
    """Runs auto until its online choice for this size has settled (its bucket
    exploits a winner), so the timed rounds measure the choice, not the
    exploration. Calls may still be running when a rank looks, so the ranks
    agree (on the timing group) before they stop: all make the same calls."""
    import torch
    import torch.distributed as dist

    if backend.config.autotune != "online" or dist.get_world_size() == 1:
        return  # auto does not measure: nothing to settle
    bucket = _C.auto_bucket_bytes(nbytes)
    for i in range(limit):
        if i % 8 == 0:
            done = any(b["bytes"] == bucket and b["phase"] == "exploiting" for b in backend.tuning())
            flag = torch.tensor([1 if done else 0], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=timing)
            if flag.item():
                return
        fn()


def _auto_note(per_round, fixed, handle, device, nbytes: int) -> str:
    """auto against the fixed algorithm with the lowest median round, paired by
    round (in place where measured): the median ratio and its spread over rounds."""

    def rounds_of(label):
        return per_round.get((label, True)) or per_round.get((label, False)) or []

    auto = rounds_of("scalecomm:auto")
    best = min(
        (f for f in fixed if rounds_of(f)), key=lambda f: statistics.median(rounds_of(f)), default=None
    )
    if best is None or not auto:
        return ""
    ratios = [a / b for a, b in zip(auto, rounds_of(best), strict=False) if b > 0]
    bucket = _C.auto_bucket_bytes(nbytes)
    buckets = [b for b in handle._get_backend(device).tuning() if b["bytes"] == bucket]
    ran = buckets[0]["algorithm"] if buckets else "?"
    ratio = statistics.median(ratios)
    return f"auto->{ran} {ratio:.2f}x of {best.split(':', 1)[1]} [{min(ratios):.2f}-{max(ratios):.2f}]"


def _progress(args, rank):
    enabled = rank == 0 and (args.progress or sys.stderr.isatty())

    def report(text: str, done: bool = False) -> None:
        if enabled:
            sys.stderr.write(("\r" + text.ljust(70)) if not done else "\r" + " " * 72 + "\r")
            sys.stderr.flush()

    return report


def run(args) -> int:
    import torch
    import torch.distributed as dist

    import pyscalecomm

    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    table, timing = _implementations(args, dist, pyscalecomm)
    rank, n = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, _DTYPES[args.datatype])
    esize = torch.empty((), dtype=dtype).element_size()
    stat = _STATS[args.average]
    size_list = sizes(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes)
    world_be = dist.group.WORLD._get_backend(torch.device("cpu"))
    cfg = world_be.config if hasattr(world_be, "config") else pyscalecomm._C.BackendConfig()
    probed = world_be.cost_params if hasattr(world_be, "cost_params") else {}
    segment = probed.get("segment_bytes") or cfg.segment_bytes  # 0 in the config: resolved by the group
    # The shared windows the model prices (none where the ranks do not share them).
    window_bytes = cfg.shm_window_bytes if "shared" in world_be.allreduce_algorithms(8) else 0
    progress = _progress(args, rank)
    total_steps = sum(len(impls) for impls in table.values()) * len(size_list)
    step = 0
    records, total_wrong = [], 0
    out = print if rank == 0 else (lambda *a, **k: None)
    out(
        f"# scalecomm bench: world {n}, type {args.datatype}, op {args.op}, root {args.root}, "
        f"iters {args.iters}, "
        f"warmup {args.warmup_iters}, rounds {args.rounds}, time = {stat} across ranks; scalecomm: algorithm "
        f"{cfg.algorithm}, transport {cfg.transport}, segment {segment} B"
        + (f"; --algos {args.algos}" if args.algos else "")
    )
    for coll in args.collectives:
        if coll == "ps":
            records += run_ps(args, size_list, n, out, progress)
            continue
        impls = table[coll]
        width = max(12, *(len(i.label) for i in impls))
        base_label = args.baselines[0] if args.baselines else None
        out(f"#\n# {coll}: busbw = algbw x {busbw_factor(coll, n):.3f}")
        out(
            f"# {'size':>10} {'count':>11} {'type':>8} {'redop':>6} {'root':>4} {'implementation':>{width}}"
            f" | {'out-of-place':^33} | {'in-place':^33} | {'busbw/' + (base_label or '-'):>12} {'':<16}"
        )
        out(
            f"# {'(B)':>10} {'(elements)':>11} {'':>8} {'':>6} {'':>4} {'':>{width}}"
            + f" | {'time(us)':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6}" * 2
            + f" | {'':>12} {'winner':<16}"
        )
        busbw_sums = {i.label: [0.0, 0] for i in impls}
        for size in size_list:
            count = element_count(coll, size, esize, n)
            nbytes = count * esize
            cases = {
                ip: make_case(coll, count, dtype, rank, n, ip, args.root, args.op, device=device)
                for ip in (False, True)
            }
            runners = {
                (i.label, ip): _runner(i, c, args, dist) if c else None
                for i in impls
                for ip, c in cases.items()
            }
            for impl in impls:
                if impl.algo == "auto" and impl.kind == "scalecomm":
                    for ip in (False, True):
                        if runners[(impl.label, ip)] is not None:
                            settle_auto(
                                runners[(impl.label, ip)], impl.handle._get_backend(device), nbytes, timing
                            )
            best, per_round = {}, {}
            for _round in range(max(1, args.rounds)):
                for impl in impls:
                    step += 0 if _round else 1
                    progress(f"[{step}/{total_steps}] {coll} {nbytes} B {impl.label} (round {_round + 1})")
                    for ip in (False, True):
                        fn = runners[(impl.label, ip)]
                        if fn is None:
                            continue
                        lossy = impl.kind == "compress"
                        stats, wrong, iters = measure(
                            fn,
                            cases[ip],
                            timing,
                            args.iters,
                            args.warmup_iters,
                            args.min_time,
                            args.check and not lossy,
                        )
                        if lossy:
                            wrong = relative_error(fn, cases[ip], timing)
                        key = (impl.label, ip)
                        per_round.setdefault(key, []).append(stats[stat])
                        if key not in best or stats[stat] < best[key][0][stat]:
                            best[key] = (stats, max(wrong, best.get(key, (None, 0))[1]), iters)
            progress("", done=True)
            # One busbw per implementation for ranking: in place where it exists.
            rank_bw = {}
            for impl in impls:
                for ip in (True, False):
                    if (impl.label, ip) in best:
                        rank_bw.setdefault(impl.label, nbytes / best[(impl.label, ip)][0][stat] / 1e9)
            ours = [i.label for i in impls if i.kind == "scalecomm" and i.label in rank_bw]
            winner = max(rank_bw, key=rank_bw.get) if rank_bw else ""
            fixed = [lab for lab in ours if lab != "scalecomm:auto"]
            for impl in impls:
                redop = args.op if coll in _REDUCING else "none"
                row = f"  {nbytes:>10} {count:>11} {args.datatype:>8} {redop:>6}"
                root = args.root if coll in ("broadcast", "reduce") else -1
                row += f" {root:>4} {impl.label:>{width}}"
                for ip in (False, True):
                    if (impl.label, ip) not in best:
                        row += f" | {'n/a':>9} {'':>7} {'':>7} {'':>6}"
                        continue
                    stats, wrong, iters = best[(impl.label, ip)]
                    sec = stats[stat]
                    algbw = nbytes / sec / 1e9
                    busbw = algbw * busbw_factor(coll, n)
                    busbw_sums[impl.label][0] += busbw
                    busbw_sums[impl.label][1] += 1
                    lossy = impl.kind == "compress"
                    total_wrong += 0 if lossy else max(0, wrong)
                    shown = f"~{wrong:.3f}" if lossy else wrong
                    row += f" | {sec * 1e6:>9.1f} {algbw:>7.3f} {busbw:>7.3f} {shown:>6}"
                    records.append(
                        {
                            "collective": coll,
                            "implementation": impl.label,
                            "backend": impl.kind,
                            "algorithm": impl.algo
                            or (cfg.algorithm if impl.kind == "scalecomm" else impl.kind),
                            "transport": cfg.transport if impl.kind == "scalecomm" else impl.kind,
                            "segment_bytes": segment if impl.kind == "scalecomm" else None,
                            "world_size": n,
                            "bytes": nbytes,
                            "count": count,
                            "dtype": args.datatype,
                            "op": args.op,
                            "root": args.root,
                            "inplace": ip,
                            "time_us": sec * 1e6,
                            "time_us_min": stats["min"] * 1e6,
                            "time_us_avg": stats["avg"] * 1e6,
                            "time_us_max": stats["max"] * 1e6,
                            "time_stat": stat,
                            "algbw_GBps": algbw,
                            "busbw_GBps": busbw,
                            "busbw_factor": busbw_factor(coll, n),
                            "wrong": None if lossy else wrong,
                            "codec": impl.algo if lossy else None,
                            "relerr": wrong if lossy else None,
                            "wire_bytes": wire_bytes(impl.algo, count) if lossy else nbytes,
                            "iters": iters,
                            "warmup_iters": args.warmup_iters,
                            "rounds": args.rounds,
                            "time_us_rounds": [t * 1e6 for t in per_round.get((impl.label, ip), [])],
                            "model_alpha": probed.get("alpha") if impl.kind == "scalecomm" else None,
                            "model_beta": probed.get("beta") if impl.kind == "scalecomm" else None,
                            "model": probed if impl.kind == "scalecomm" else None,
                            "window_bytes": window_bytes if impl.kind == "scalecomm" else None,
                        }
                    )
                ratio = ""
                if base_label in rank_bw and impl.label in rank_bw and impl.label != base_label:
                    ratio = f"{rank_bw[impl.label] / rank_bw[base_label]:.2f}x"
                note = "<- winner" if impl.label == winner and len(impls) > 1 else ""
                if impl.label == "scalecomm:auto" and fixed and "scalecomm:auto" in rank_bw:
                    note = (note + " " if note else "") + _auto_note(
                        per_round, fixed, impl.handle, device, nbytes
                    )
                out(row + f" | {ratio:>12} {note:<16}", flush=True)
        for impl in impls:
            total, k = busbw_sums[impl.label]
            if k:
                out(f"# Avg bus bandwidth    : {total / k:.3f} GB/s  ({coll}, {impl.label})")
    out("#\n# Out of bounds values : " + (f"{total_wrong} FAILED" if total_wrong else "0 OK"))
    if rank == 0 and args.json:
        with open(args.json, "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    plotted = [r for r in records if r["collective"] != "ps"]
    if rank == 0 and args.plot and plotted:
        plot_busbw(plotted, args.plot, n)
        out(f"# plot: {args.plot}")
    dist.destroy_process_group()
    return 1 if total_wrong else 0


def run_ps(args, size_list: list[int], n: int, out, progress) -> list[dict]:
    """The parameter server's rows (see the module's doc); its JSON records."""
    backends = ["scalecomm", *(b for b in args.baselines if b == "gloo")]
    keys = 16
    out(f"#\n# ps: async, {keys} keys, servers ranks 0..S-1, {n} workers; time = the slowest rank's")
    out(
        f"# {'size':>10} {'backend':>10} {'servers':>7} | {'step(us)':>9} {'requests/s':>11} {'GB/s':>7}"
        f" | {'vs 1 server':>11}"
    )
    records = []
    for size in size_list:
        nbytes = max(4 * keys, size - size % (4 * keys))
        rounds: dict[tuple[str, int], list[float]] = {(b, s): [] for b in backends for s in range(1, n + 1)}
        for _ in range(args.rounds):
            for b, s in rounds:
                progress(f"ps {nbytes} B {b} {s} server(s)")
                rounds[(b, s)].append(
                    ps_step_seconds(s, nbytes, keys, args.iters, args.warmup_iters, backend=b)
                )
        for (b, s), ts in rounds.items():
            t = min(ts)  # the fastest round, as the collectives' rows
            one = min(rounds[(b, 1)])
            requests = 2 * n * s / t  # every worker pushes and pulls each shard every step
            moved = 2 * n * nbytes / t
            out(
                f"  {nbytes:>10} {b:>10} {s:>7} | {1e6 * t:>9.1f} {requests:>11.0f} {moved / 1e9:>7.3f}"
                f" | {one / t:>10.2f}x",
                flush=True,
            )
            records.append(
                {
                    "collective": "ps",
                    "bytes": nbytes,
                    "backend": b,
                    "servers": s,
                    "world": n,
                    "keys": keys,
                    "time_us": 1e6 * t,
                    "time_us_rounds": [1e6 * x for x in ts],
                    "requests_per_s": requests,
                    "GBps": moved / 1e9,  # pushed and pulled, all servers
                }
            )
    return records


def plot_busbw(records: list[dict], path: str, n: int) -> None:
    """busbw against size, one line per implementation (in place where measured), one panel per collective."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colls = list(dict.fromkeys(r["collective"] for r in records))
    labels = list(dict.fromkeys(r["implementation"] for r in records))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {lab: palette[i % len(palette)] for i, lab in enumerate(labels)}  # one colour per implementation
    fig, axes = plt.subplots(len(colls), 1, figsize=(8, 3.6 * len(colls)), squeeze=False)
    for ax, coll in zip(axes[:, 0], colls, strict=True):
        rows = [r for r in records if r["collective"] == coll]
        for label in dict.fromkeys(r["implementation"] for r in rows):
            mine = [r for r in rows if r["implementation"] == label]
            ip = [r for r in mine if r["inplace"]] or mine
            ip.sort(key=lambda r: r["bytes"])
            xs, ys = [r["bytes"] for r in ip], [r["busbw_GBps"] for r in ip]
            ax.plot(xs, ys, marker="o", label=label, color=color[label])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{coll}, {n} ranks")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    from pyscalecomm.launch import main_with_launcher

    return main_with_launcher("pyscalecomm.bench", parse_args(argv), argv, run)


if __name__ == "__main__":
    sys.exit(main())
