"""nccl-tests-style allreduce benchmark for scalecomm, with gloo in the same run.

Run on one machine:    python -m pyscalecomm.bench --nproc 2 -b 8 -e 256M
Under a launcher:      torchrun --nproc-per-node 4 -m pyscalecomm.bench -b 1M -e 64M
                       mpirun -np 4 python -m pyscalecomm.bench ...

Columns follow nccl-tests: size (bytes), count (elements), type, redop, then
per backend: time (us, mean of -n back-to-back iterations, max over ranks),
algbw = size / time, busbw = algbw * 2 (n-1) / n (GB/s), #wrong (elements that
differ from the closed-form result after a checked iteration). torch's
all_reduce is in place, so there is one (in-place) column set. ``--json`` adds
one JSON line per measurement with the full configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

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


def parse_size(text: str) -> int:
    """'8', '64K', '1M', '2G' -> bytes."""
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(text)


def sizes(begin: int, end: int, factor: int, step: int) -> list[int]:
    out, s = [], begin
    while s <= end:
        out.append(s)
        s = s + step if step else s * factor
    return out


def busbw_factor(n: int) -> float:
    """nccl-tests' allreduce bus bandwidth factor 2(n-1)/n."""
    return 2.0 * (n - 1) / n if n > 1 else 1.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m pyscalecomm.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.add_argument("--backends", default="scalecomm,gloo", help="comma list; the first is the default group")
    p.add_argument("--nproc", type=int, default=0, help="spawn this many local ranks (no launcher needed)")
    p.add_argument("--json", default="", help="append one JSON line per measurement to this file")
    p.add_argument(
        "--min-time",
        type=float,
        default=0.0,
        help="raise iterations per size until a size's timed loop lasts this many seconds",
    )
    return p.parse_args(argv)


def _fill(t, rank, torch):
    t.fill_(rank + 1)


def _expected(op: str, n: int) -> float:
    vals = [r + 1 for r in range(n)]
    if op == "sum":
        return float(sum(vals))
    if op == "prod":
        out = 1.0
        for v in vals:
            out *= v
        return out
    if op == "min":
        return 1.0
    if op == "max":
        return float(n)
    return sum(vals) / n  # avg


def run(args) -> None:
    import torch
    import torch.distributed as dist

    import pyscalecomm  # noqa: F401

    backends = [b for b in args.backends.split(",") if b]
    dist.init_process_group(backends[0])
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = {backends[0]: dist.group.WORLD}
    for b in backends[1:]:
        groups[b] = dist.new_group(backend=b)
    timing_group = groups.get("gloo") or dist.group.WORLD
    dtype = getattr(torch, _DTYPES[args.datatype])
    esize = torch.empty((), dtype=dtype).element_size()
    op = {
        "sum": dist.ReduceOp.SUM,
        "prod": dist.ReduceOp.PRODUCT,
        "min": dist.ReduceOp.MIN,
        "max": dist.ReduceOp.MAX,
        "avg": dist.ReduceOp.AVG,
    }[args.op]
    if args.op == "avg" and "gloo" in backends:
        raise SystemExit("gloo has no AVG; pick another op or drop gloo from --backends")
    step = parse_size(args.stepbytes)
    size_list = sizes(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor, step)
    cfg = pyscalecomm._C.BackendConfig()
    if rank == 0:
        print(
            f"# scalecomm bench: allreduce, world {n}, type {args.datatype}, op {args.op}, "
            f"iters {args.iters}, warmup {args.warmup_iters}, algorithm {cfg.algorithm}, "
            f"transport {cfg.transport}, segment {cfg.segment_bytes} B"
        )
        head = f"{'size':>12} {'count':>11} {'type':>8} {'redop':>6}"
        for b in backends:
            head += f" | {b:>10} {'time(us)':>10} {'algbw':>7} {'busbw':>7} {'#wrong':>6}"
        if len(backends) > 1:
            head += f" | {'busbw ' + backends[0] + '/' + backends[1]:>22}"
        print(head)
        print(
            f"{'(B)':>12} {'(elements)':>11} {'':>8} {'':>6}"
            + "".join(f" | {'':>10} {'':>10} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}" for _ in backends),
            flush=True,
        )
    for size in size_list:
        count = max(1, size // esize)
        nbytes = count * esize
        t = torch.empty(count, dtype=dtype)
        row = f"{nbytes:>12} {count:>11} {args.datatype:>8} {args.op:>6}"
        busbws = []
        for b in backends:
            g = groups[b]
            _fill(t, rank, torch)
            for _ in range(args.warmup_iters):
                dist.all_reduce(t, op=op, group=g)
            iters = args.iters
            while True:
                dist.barrier(group=timing_group)
                start = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(t, op=op, group=g)
                elapsed = time.perf_counter() - start
                tt = torch.tensor([elapsed], dtype=torch.float64)
                dist.all_reduce(tt, op=dist.ReduceOp.MAX, group=timing_group)
                if tt.item() >= args.min_time or iters >= 1 << 20:
                    break
                iters *= 2
            sec = tt.item() / iters
            wrong = -1
            if args.check:
                _fill(t, rank, torch)
                dist.all_reduce(t, op=op, group=g)
                want = torch.full_like(t, _expected(args.op, n))
                wrong_t = torch.tensor([int((t != want).sum())], dtype=torch.int64)
                dist.all_reduce(wrong_t, group=timing_group)
                wrong = int(wrong_t.item())
            algbw = nbytes / sec / 1e9
            busbw = algbw * busbw_factor(n)
            busbws.append(busbw)
            row += f" | {'':>10} {sec * 1e6:>10.1f} {algbw:>7.3f} {busbw:>7.3f} {wrong:>6}"
            if rank == 0 and args.json:
                with open(args.json, "a") as f:
                    f.write(
                        json.dumps(
                            {
                                "collective": "allreduce",
                                "backend": b,
                                "world_size": n,
                                "bytes": nbytes,
                                "count": count,
                                "dtype": args.datatype,
                                "op": args.op,
                                "time_us": sec * 1e6,
                                "algbw_gbps": algbw,
                                "busbw_gbps": busbw,
                                "wrong": wrong,
                                "iters": iters,
                                "algorithm": cfg.algorithm if b == "scalecomm" else b,
                                "transport": cfg.transport if b == "scalecomm" else b,
                                "segment_bytes": cfg.segment_bytes if b == "scalecomm" else None,
                                "inplace": True,
                            }
                        )
                        + "\n"
                    )
        if len(busbws) > 1:
            row += f" | {busbws[0] / busbws[1]:>21.2f}x"
        if rank == 0:
            print(row, flush=True)
        del t
    dist.destroy_process_group()


def main(argv=None) -> int:
    from pyscalecomm.launch import main_with_launcher

    return main_with_launcher("pyscalecomm.bench", parse_args(argv), argv, run)


if __name__ == "__main__":
    sys.exit(main())
