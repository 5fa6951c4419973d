"""nccl-tests-style collective benchmark: scalecomm's algorithms and baselines in one run.

Run on one machine:    python -m pyscalecomm.bench --nproc 2 -b 8 -e 256M
Under a launcher:      torchrun --nproc-per-node 4 -m pyscalecomm.bench -b 1M -e 64M
                       mpirun -n 4 python -m pyscalecomm.bench -b 1M -e 64M --baselines gloo,mpi
Every collective:      ... --collectives all   (allreduce broadcast reduce allgather reduce_scatter alltoall)
Parameter server:      ... --collectives ps      (pushes + pulls per second over 1..world server shards)

One row per size and implementation (a scalecomm algorithm from --algos, or a
baseline from --baselines), with nccl-tests' columns for out-of-place and
in-place: time (us per call; -a picks the statistic across ranks, default the
average), cpu (us of CPU time per call, every thread of a rank's process
together: what the call takes from computation that could overlap it; the
mean over ranks), algbw = size / time, busbw = algbw x the collective's factor
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

Baselines: gloo (torch's CPU backend), mpi (MPI's own collectives through
mpi4py on the same buffers; needs mpirun) and deepspeed (DeepSpeed's CPU
shared-memory allreduce, in place, sum of float32/bf16/fp16, ranks of one
host; needs DeepSpeed installed, which builds its kernel on first use). ``--api direct`` times scalecomm's
allreduce rows through the direct API instead of ``dist.all_reduce``:
``pyscalecomm.allreduce`` on NumPy arrays over the same memory (out of place:
``out=``), with no torch dispatch, as mpi4py's ``comm.Allreduce`` is called.
The timing runs back-to-back calls between barriers on a separate gloo
group, each loop at least --min-time seconds (iterations doubled from -n
until it is); --rounds R times every implementation R times per size,
interleaved in a balanced order (each one
first once and right after every other once per cycle of rounds). The table
gives each one's median round and, beside its time, half the range of its
rounds as a share of the median (±%); a row whose rounds spread over 25 %
is marked noisy (run more rounds, or on a quieter machine). The JSON lines
carry every round (time_us_rounds). Codec rows (--compress) are lossy:
their algbw and busbw are effective (the uncompressed size over the time),
#wrong shows their relative error (~0.012), and they are never the winner,
which is the fastest exact implementation.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys

from pyscalecomm import _C
from pyscalecomm._cli import HelpFormatter, add_nproc, add_version
from pyscalecomm.bench.ps import run_ps
from pyscalecomm.bench.rows import Row, Table, noisy_note, plot_busbw, write_jsonl
from pyscalecomm.bench.specs import (
    COLLECTIVES,
    algorithm_applies,
    busbw_factor,
    deepspeed_op,
    deepspeed_runner,
    element_count,
    known_algorithms,
    make_case,
    mpi_runner,
    torch_runner,
    wire_bytes,
)
from pyscalecomm.bench.timing import measure, relative_error, round_order, settle_auto
from pyscalecomm.launch import local_gpu

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
    p.add_argument("-b", "--minbytes", default="8", help="smallest size in bytes (8, 1K, 1M)")
    p.add_argument("-e", "--maxbytes", default="64M", help="largest size in bytes")
    p.add_argument(
        "-f", "--stepfactor", type=int, default=4, help="multiply the size by this from one row to the next"
    )
    p.add_argument("-i", "--stepbytes", default="0", help="bytes to add instead of multiplying (0: multiply)")
    p.add_argument(
        "-n", "--iters", type=int, default=20, help="timed iterations per size (at least; see --min-time)"
    )
    p.add_argument(
        "-w", "--warmup_iters", type=int, default=5, help="untimed iterations per size before the timed ones"
    )
    p.add_argument("-c", "--check", type=int, default=1, help="check results (1) or not (0)")
    p.add_argument("-d", "--datatype", default="float", choices=sorted(_DTYPES), help="element type")
    p.add_argument(
        "-o", "--op", default="sum", choices=_OPS, help="reduction of allreduce, reduce and reduce_scatter"
    )
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
        help="comma list of gloo, mpi (mpi needs mpirun), deepspeed (its CPU shm allreduce), nccl (CUDA); "
        "'none'. "
        "Default: gloo on cpu, nccl on cuda",
    )
    p.add_argument(
        "--compress",
        default="",
        help="comma list of codecs for extra allreduce rows, e.g. topk:0.01,qsgd:8,sign,powersgd:4 "
        "(in place; #wrong shows the relative error of the lossy sum; wire bytes in the JSON); "
        "<codec>@torch or <codec>@host: on a group with that codec_kernels setting, e.g. "
        "topk:0.01@host,topk:0.01@torch on cuda compares staging through the host with the GPU",
    )
    p.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="where the buffers live; cuda puts each rank on GPU LOCAL_RANK modulo the GPUs visible "
        "(scalecomm over NCCL; --algos ring,nccl compares ours with NCCL's; ranks sharing a GPU get "
        "their own NCCL_HOSTID, so NCCL joins them through its socket transport)",
    )
    p.add_argument(
        "--api",
        default="torch",
        choices=("torch", "direct"),
        help="how scalecomm's rows call allreduce: torch (dist.all_reduce) or direct (pyscalecomm.allreduce "
        "on NumPy arrays of the same memory, no torch dispatch; allreduce only)",
    )
    p.add_argument("--backends", default="", help=argparse.SUPPRESS)  # old spelling: scalecomm,gloo
    p.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="time every implementation this many times, round-robin; the table gives the median round "
        "and its spread",
    )
    p.add_argument(
        "--busy",
        type=int,
        default=0,
        help="a loaded machine: this many processes spinning on the cores for the whole run, beside the "
        "ranks (started by the first rank of each host)",
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
        default=0.02,
        help="seconds: raise iterations per size until a size's timed loop lasts this long",
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
    if args.busy < 0:
        p.error(f"--busy {args.busy}: a count of processes, 0 or more")
    if args.api == "direct" and args.collectives != ["allreduce"]:
        p.error("--api direct: the direct API has allreduce only; use --collectives allreduce")
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
        if b not in ("gloo", "mpi", "deepspeed", "nccl"):
            p.error(f"unknown baseline {b!r}; choose gloo, mpi, deepspeed, nccl or none")
    if "nccl" in args.baselines and args.device != "cuda":
        p.error("--baselines nccl needs --device cuda")
    if "deepspeed" in args.baselines and args.device != "cpu":
        p.error("--baselines deepspeed is DeepSpeed's CPU shared-memory allreduce: it needs --device cpu")
    if "deepspeed" in args.baselines and importlib.util.find_spec("deepspeed") is None:
        p.error("--baselines deepspeed needs DeepSpeed (pip install deepspeed)")
    # (spec as given, codec, the codec_kernels setting or "") per --compress entry.
    args.compress = [(spec, *spec.partition("@")[::2]) for spec in args.compress.split(",") if spec]
    for spec, _, kernels in args.compress:
        if kernels not in ("", "auto", "torch", "host"):
            p.error(f"--compress {spec}: after @ comes the codec_kernels setting, torch, host or auto")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            p.error("--device cuda: this machine has no usable GPU (torch.cuda.is_available() is False)")
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
    deepspeed = None
    if "deepspeed" in args.baselines:
        deepspeed = deepspeed_op(dist.get_rank(), n)
        if deepspeed is None:
            raise SystemExit("--baselines deepspeed needs DeepSpeed (pip install deepspeed)")
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
            for spec, codec, kernels in args.compress:
                if kernels and spec not in groups:
                    groups[spec] = dist.new_group(
                        backend="scalecomm", pg_options=pyscalecomm.Options(codec_kernels=kernels)
                    )
                handle = groups[spec] if kernels else dist.group.WORLD
                impls.append(Impl(f"scalecomm:{spec}", "compress", handle, codec))
        if nccl is not None:
            impls.append(Impl("nccl", "nccl", nccl))
        if mpi_comm is not None:
            impls.append(Impl("mpi", "mpi", mpi_comm))
        if deepspeed is not None and c == "allreduce":
            impls.append(Impl("deepspeed", "deepspeed", deepspeed))
        table[c] = impls
    return table, timing


def _runner(impl, case, args, state=""):
    if impl.kind == "compress":
        if not case.inplace or args.op not in ("sum", "avg"):
            return None
        import pyscalecomm

        # `state` names the codec state (PowerSGD's warm start): the error
        # check's own, since the timed calls sum in place until they overflow.
        key = f"bench:{impl.algo}:{case.count}{state}"
        return lambda: pyscalecomm.allreduce(
            case.inp, impl.algo, op=args.op, group=impl.handle, key=key, error_feedback=False
        )
    if impl.kind == "mpi":
        return mpi_runner(case, impl.handle, args.op)
    if impl.kind == "deepspeed":
        return deepspeed_runner(case, args.op)
    fixed = impl.algo not in ("", "auto", "mpi", "nccl")
    if impl.kind == "scalecomm" and case.collective == "allreduce" and fixed:
        be = impl.handle._get_backend(case.inp.device)
        if impl.algo not in be.allreduce_algorithms(case.count * case.inp.element_size()):
            return None  # e.g. pairwise above 4032 bytes, shared above its window
    if impl.kind == "gloo" and args.op == "avg" and case.spec.reduces:
        return None  # gloo has no AVG
    if impl.kind == "scalecomm" and args.api == "direct":
        return _direct_runner(case, impl.handle, args.op)
    from pyscalecomm.direct import reduce_op

    return torch_runner(case, impl.handle, reduce_op(args.op))


def _direct_runner(case, group, op):
    """pyscalecomm.allreduce on NumPy arrays over the case's memory (tensors
    where NumPy has no such type, or on a GPU), as mpi4py is called."""
    import torch

    import pyscalecomm

    inp, out = case.inp, case.out
    if inp.device.type == "cpu" and inp.dtype != torch.bfloat16:
        inp, out = inp.numpy(), out.numpy()
    if case.inplace:
        return lambda: pyscalecomm.allreduce(out, op=op, group=group)
    return lambda: pyscalecomm.allreduce(inp, op=op, group=group, out=out)


def _auto_ran(handle, device, nbytes: int) -> str:
    """The algorithm auto's tuner runs for messages of `nbytes` ("?" before its first call)."""
    bucket = _C.auto_bucket_bytes(nbytes)
    buckets = [b for b in handle._get_backend(device).tuning() if b["bytes"] == bucket]
    return (buckets[0]["algorithm"] or "?") if buckets else "?"


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
    ran = _auto_ran(handle, device, nbytes)
    ratio = statistics.median(ratios)
    return f"auto->{ran} {ratio:.2f}x of {best.split(':', 1)[1]} [{min(ratios):.2f}-{max(ratios):.2f}]"


def _progress(args, rank):
    enabled = rank == 0 and (args.progress or sys.stderr.isatty())

    def report(text: str, done: bool = False) -> None:
        if enabled:
            sys.stderr.write(("\r" + text.ljust(70)) if not done else "\r" + " " * 72 + "\r")
            sys.stderr.flush()

    return report


def _measure_size(coll, size, impls, args, ctx) -> tuple[dict, dict]:
    """Times every implementation at one size, ``args.rounds`` times round-robin.

    Returns {(label, inplace): Row} (each is its median round, with every
    round in ``time_us_rounds``) and {(label, inplace): [seconds per round]}."""

    n, rank, device = ctx["n"], ctx["rank"], ctx["device"]
    count = element_count(coll, size, ctx["esize"], n)
    cases = {
        ip: make_case(coll, count, ctx["dtype"], rank, n, ip, args.root, args.op, device=device)
        for ip in (False, True)
    }
    runners = {(i.label, ip): _runner(i, c, args) if c else None for i in impls for ip, c in cases.items()}
    nbytes = count * ctx["esize"]
    for impl in impls:
        if impl.algo == "auto" and impl.kind == "scalecomm":
            for ip in (False, True):
                if runners[(impl.label, ip)] is not None:
                    settle_auto(runners[(impl.label, ip)], impl.handle._get_backend(device), nbytes)
    measured: dict = {}  # (label, inplace) -> [Row of each round]
    per_round: dict = {}
    for round_ in range(max(1, args.rounds)):
        for impl in round_order(impls, round_):
            ctx["progress"](f"{coll} {nbytes} B {impl.label} (round {round_ + 1} of {args.rounds})")
            for ip in (False, True):
                fn = runners[(impl.label, ip)]
                if fn is None:
                    continue
                lossy = impl.kind == "compress"
                timing = ctx["timing"]
                stats, wrong, iters = measure(
                    fn,
                    cases[ip],
                    timing,
                    args.iters,
                    args.warmup_iters,
                    args.min_time,
                    args.check and not lossy,
                )
                relerr = (
                    relative_error(_runner(impl, cases[ip], args, ":error"), cases[ip], timing)
                    if lossy
                    else None
                )
                key = (impl.label, ip)
                per_round.setdefault(key, []).append(stats[ctx["stat"]])
                row = _row(impl, coll, cases[ip], stats, iters, args, ctx)
                row.wrong, row.relerr = (None, relerr) if lossy else (wrong, None)
                measured.setdefault(key, []).append(row)
    ctx["progress"]("", done=True)
    return {key: median_round(rows) for key, rows in measured.items()}, per_round


def median_round(rounds: list[Row]) -> Row:
    """The row of the median round (the lower middle one for an even count),
    carrying every round's time; its check's verdict (#wrong) and error are
    the worst of every round's."""
    row = sorted(rounds, key=lambda r: r.time_us)[(len(rounds) - 1) // 2]
    row.time_us_rounds = [r.time_us for r in rounds]
    if row.lossy:
        row.relerr = max(r.relerr for r in rounds)
    else:
        row.wrong = max(r.wrong for r in rounds)
    return row


def pick_winner(bandwidth: dict[str, float], lossy: set[str]) -> str:
    """The fastest exact implementation ("" with fewer than two): a codec's
    effective bandwidth is bought with its error, so a lossy row never wins."""
    exact = {label: bw for label, bw in bandwidth.items() if label not in lossy}
    return max(exact, key=exact.get) if len(exact) > 1 else ""


def _row(impl, coll, case, stats, iters, args, ctx) -> Row:
    """The row of one measurement (``wrong`` and ``relerr`` filled by the caller)."""
    ours = impl.kind == "scalecomm"
    lossy = impl.kind == "compress"
    nbytes = case.count * ctx["esize"]
    return Row(
        collective=coll,
        implementation=impl.label,
        backend=impl.kind,
        algorithm=impl.algo or (ctx["cfg"].algorithm if ours else impl.kind),
        world_size=ctx["n"],
        bytes=nbytes,
        count=case.count,
        dtype=args.datatype,
        op=args.op if case.spec.reduces else "none",
        root=args.root if case.spec.rooted else -1,
        inplace=case.inplace,
        time_us=stats[ctx["stat"]] * 1e6,
        time_us_min=stats["min"] * 1e6,
        time_us_avg=stats["avg"] * 1e6,
        time_us_max=stats["max"] * 1e6,
        cpu_us=stats["cpu"] * 1e6,
        time_stat=ctx["stat"],
        busbw_factor=busbw_factor(coll, ctx["n"]),
        iters=iters,
        warmup_iters=args.warmup_iters,
        rounds=args.rounds,
        codec=impl.algo if lossy else None,
        wire_bytes=wire_bytes(impl.algo, case.count) if lossy else nbytes,
        transport=ctx["cfg"].transport if ours else impl.kind,
        segment_bytes=ctx["segment"] if ours else None,
        model=ctx["probed"] if ours else None,
        model_alpha=ctx["probed"].get("alpha") if ours else None,
        model_beta=ctx["probed"].get("beta") if ours else None,
        window_bytes=ctx["window_bytes"] if ours else None,
    )


# A busy process: spins until its bound, or as soon as its parent (the rank
# that started it) is gone, checked every few milliseconds.
_SPIN = (
    "import os, sys, time\n"
    "parent, end = os.getppid(), time.monotonic() + float(sys.argv[1])\n"
    "while time.monotonic() < end and os.getppid() == parent:\n"
    "    for _ in range(20000):\n"
    "        pass\n"
)


def start_busy(count: int, bound_s: float = 6 * 3600.0) -> list:
    """``count`` processes spinning on this machine's cores (the loaded case);
    each ends at ``bound_s``, when this process ends, or at stop_busy()."""
    import subprocess

    return [subprocess.Popen([sys.executable, "-c", _SPIN, str(bound_s)]) for _ in range(count)]


def stop_busy(procs: list) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


def run(args) -> int:
    import os

    busy = start_busy(args.busy) if args.busy and os.environ.get("LOCAL_RANK", "0") == "0" else []
    try:
        return _run(args)
    finally:
        stop_busy(busy)


def _run(args) -> int:
    import torch
    import torch.distributed as dist

    import pyscalecomm

    device = torch.device("cpu")
    if args.device == "cuda":
        device = local_gpu()
    table, timing = _implementations(args, dist, pyscalecomm)
    rank, n = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, _DTYPES[args.datatype])
    world_be = dist.group.WORLD._get_backend(torch.device("cpu"))
    cfg = world_be.config if hasattr(world_be, "config") else pyscalecomm._C.BackendConfig()
    probed = world_be.cost_params if hasattr(world_be, "cost_params") else {}
    ctx = {
        "n": n,
        "rank": rank,
        "device": device,
        "dtype": dtype,
        "esize": torch.empty((), dtype=dtype).element_size(),
        "stat": _STATS[args.average],
        "timing": timing,
        "cfg": cfg,
        "probed": probed,
        "segment": probed.get("segment_bytes") or cfg.segment_bytes,  # 0 in the config: resolved by the group
        # The shared windows the model prices (none where the ranks do not share them).
        "window_bytes": cfg.shm_window_bytes if "shared" in world_be.allreduce_algorithms(8) else 0,
        "progress": _progress(args, rank),
    }
    size_list = sizes(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes)
    out = print if rank == 0 else (lambda *a, **k: None)
    out(
        f"# scalecomm bench: world {n}, type {args.datatype}, op {args.op}, root {args.root}, "
        f"iters >= {args.iters} and >= {args.min_time:g} s a loop, warmup {args.warmup_iters}, "
        f"time = {ctx['stat']} across ranks, median of {args.rounds} round(s) (±: half their range); "
        f"scalecomm: algorithm {cfg.algorithm}, transport {cfg.transport}, segment {ctx['segment']} B"
        + (f"; --algos {args.algos}" if args.algos else "")
        + ("; scalecomm through the direct API (pyscalecomm.allreduce)" if args.api == "direct" else "")
        + (f"; {args.busy} busy process(es) spinning beside the ranks on each host" if args.busy else "")
    )
    if args.rounds < 3:
        out(f"# only {args.rounds} round(s): no spread to judge the times by; use --rounds 5 or more")
    if args.compress:
        out("# codec rows are lossy: effective algbw/busbw (uncompressed size / time); #wrong: ~rel. error")
    render = Table(out)
    rows: list[Row] = []
    ps_records: list[dict] = []
    for coll in args.collectives:
        if coll == "ps":
            ps_records += run_ps(args, size_list, n, out, ctx["progress"])
            continue
        impls = table[coll]
        base_label = args.baselines[0] if args.baselines else None
        render.header(coll, busbw_factor(coll, n), [i.label for i in impls], base_label)
        for size in size_list:
            best, per_round = _measure_size(coll, size, impls, args, ctx)
            rows += best.values()
            # One busbw per implementation for ranking: in place where it exists.
            rank_bw = {}
            for impl in impls:
                for ip in (True, False):
                    if (impl.label, ip) in best:
                        rank_bw.setdefault(impl.label, best[(impl.label, ip)].algbw_GBps)
            winner = pick_winner(rank_bw, {i.label for i in impls if i.kind == "compress"})
            fixed = [
                i.label for i in impls if i.kind == "scalecomm" and i.label in rank_bw and i.algo != "auto"
            ]
            for impl in impls:
                placed = {ip: best.get((impl.label, ip)) for ip in (False, True)}
                shape = placed[True] or placed[False]
                if shape is None:
                    continue
                ratio = ""
                if base_label in rank_bw and impl.label in rank_bw and impl.label != base_label:
                    ratio = f"{rank_bw[impl.label] / rank_bw[base_label]:.2f}x"
                note = "<- winner" if impl.label == winner else ""
                noisy = noisy_note(max((r.spread for r in placed.values() if r is not None), default=0.0))
                if noisy:
                    note = (note + " " if note else "") + noisy
                if impl.label == "scalecomm:auto" and fixed:
                    note = (note + " " if note else "") + _auto_note(
                        per_round, fixed, impl.handle, device, shape.bytes
                    )
                if impl.label == "scalecomm:auto" and coll == "allreduce":
                    ran = _auto_ran(impl.handle, device, shape.bytes)
                    for r in placed.values():
                        if r is not None:
                            r.ran = ran
                render.line(impl.label, placed, shape, ratio, note)
        render.footer(coll)
    total_wrong = sum(max(0, r.wrong) for r in rows if r.wrong is not None)
    render.summary(total_wrong)
    if rank == 0 and args.json:
        write_jsonl(args.json, [*rows, *ps_records])
    if rank == 0 and args.plot and rows:
        plot_busbw(rows, args.plot, n)
        out(f"# plot: {args.plot}")
    dist.destroy_process_group()
    return 1 if total_wrong else 0


def main(argv=None) -> int:
    from pyscalecomm.launch import main_with_launcher

    return main_with_launcher("pyscalecomm.bench", parse_args(argv), argv, run)


if __name__ == "__main__":
    sys.exit(main())
