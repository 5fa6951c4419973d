"""scalecomm's device kernels against the memory's limit and against the torch ops they replace.

    python bench/cuda_kernels.py                      # one GPU, 256 MiB buffers
    python bench/cuda_kernels.py --size-mib 64 --rounds 9 --json kernels.json

In one process, interleaved in every round (rows in a rotating order), each
row timed with CUDA events around `--iters` back-to-back launches, the median
over `--rounds` rounds with [min-max]:

- copy: ``dst.copy_(src)`` on the device, the memory's practical limit; its
  bandwidth counts the bytes read plus the bytes written (2 x size);
- scalecomm sum / avg: the reduction a collective runs on every received
  segment, ``dst = dst + src`` (avg: then ``/ 2``, the divide kernel), per
  dtype (fp32, bf16, fp16);
- torch sum / avg: ``dst.add_(src)`` (avg: ``.div_(2)``), what the kernel replaces;
- pinned host-to-device and device-to-host copies (``non_blocking`` from and
  to page-locked memory), the limit of host staging;
- staged allreduce: a one-rank scalecomm group staging CUDA tensors through
  host memory (``SCALECOMM_CUDA_TRANSPORT=host``); with one rank there is
  nothing to send, so its time is the staging alone: the tensor down to
  pinned memory and back up, in overlapped chunks. Its "of copy" is the
  pinned h2d plus d2h copies' time of the same bytes over its own, per round
  (the goal: >= 0.8);
- codecs (``--codecs``, on ``--codec-mib`` of fp32): one rank's encode with
  error feedback and the decode of its payload, as a compressed allreduce
  runs them on a CUDA tensor (the codecs' torch form, on the device) against
  what staging costs instead (the gradient copied down to pinned memory,
  scalecomm's host codec, the decoded values copied back up).

Bandwidth of a reduction counts the fewest bytes it must move: two reads and
one write (3 x size), for avg too (a fused kernel would move no more), so an
avg done in two passes shows as slower. "of copy" is that bandwidth over the
copy's, measured in the same round: the goal is >= 0.85 for sum.

``--device cpu`` runs the same rows on host tensors with a host clock (no
pinned rows): it checks the script where there is no GPU; its numbers are not
the GPU's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from pyscalecomm import _C

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mib", type=int, default=256, help="bytes of each buffer, MiB (default 256)")
    p.add_argument("--dtypes", default="fp32,bf16,fp16", help="comma list of fp32, bf16, fp16")
    p.add_argument("--rounds", type=int, default=7, help="rounds; the table gives the median and [min-max]")
    p.add_argument("--iters", type=int, default=10, help="launches timed together in one round")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--json", default=None, help="write every round's times here")
    p.add_argument(
        "--codecs",
        default="topk:0.01,randomk:0.01,qsgd:8,sign,fp16",
        help="comma list of codecs for the codec rows ('' for none)",
    )
    p.add_argument("--codec-mib", type=int, default=16, help="bytes of the codec rows' gradient, MiB")
    args = p.parse_args(argv)
    for d in args.dtypes.split(","):
        if d not in DTYPES:
            p.error(f"--dtypes: {d!r} is not one of {', '.join(DTYPES)}")
    if args.size_mib < 1 or args.rounds < 1 or args.iters < 1:
        p.error("--size-mib, --rounds and --iters must be >= 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no GPU here (--device cpu checks the script)")
    if args.device == "cuda" and not _C.built_with_cuda:
        p.error("this scalecomm build has no CUDA kernels: build with CUDA_HOME set")
    return args


class Clock:
    """Seconds per call of fn, over `iters` calls: CUDA events on the device, a host clock on the CPU."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"

    def time(self, fn, iters: int) -> float:
        fn()  # warm: first launches, allocator
        if self.cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters


def _reductions(a, b):
    """(row, fn) of the four reductions of b into a (a grows over a round: harmless to timing)."""
    red, div = _C._testing.reduce_into, _C._testing.divide_
    return [
        ("scalecomm sum", lambda: red(a, b, "sum")),
        ("torch sum", lambda: a.add_(b)),
        ("scalecomm avg", lambda: (red(a, b, "sum"), div(a, 2))),
        ("torch avg", lambda: a.add_(b).div_(2)),
    ]


def _pinned(host, devb, mib: int):
    return [
        (f"pinned h2d {mib} MiB", lambda: devb.copy_(host, non_blocking=True)),
        (f"pinned d2h {mib} MiB", lambda: host.copy_(devb, non_blocking=True)),
    ]


def _staged(devb, mib: int):
    """(row, fn): a one-rank group's allreduce of devb, staged through host memory."""
    import torch.distributed as dist

    try:  # a failure here costs these rows, not the table
        if not dist.is_initialized():
            os.environ["SCALECOMM_CUDA_TRANSPORT"] = "host"
            dist.init_process_group("scalecomm", store=dist.HashStore(), rank=0, world_size=1)
        dist.all_reduce(devb)
    except Exception as e:  # noqa: BLE001
        print(f"# staged allreduce {mib} MiB: not timed: {type(e).__name__}: {e}", file=sys.stderr)
        return []
    return [(f"staged allreduce {mib} MiB", lambda: dist.all_reduce(devb))]


def _codecs(spec: str, x, residual, mib: int):
    """(row, fn): the codec's torch form on x's device, and staged through the host."""
    enc_dev, enc_host = _C._testing.tensor_codec_encode, _C._testing.codec_encode
    rows = [(f"codec {spec} on device", lambda: enc_dev(x, residual, spec, 1, 0))]
    if x.is_cuda:
        down = torch.empty(x.numel(), pin_memory=True)
        r_host = residual.cpu()

        def staged():
            down.copy_(x, non_blocking=True)
            torch.cuda.current_stream().synchronize()
            decoded, _, _ = enc_host(down, r_host, spec, 1, 0)
            x.copy_(decoded.pin_memory(), non_blocking=True)

        rows.append((f"codec {spec} staged", staged))
    else:  # the script check: the host codec alone
        rows.append((f"codec {spec} staged", lambda: enc_host(x, residual, spec, 1, 0)))
    return rows


def rows(args) -> list[tuple[str, str, int, object]]:
    """(name, dtype, bytes it must move, fn) for every row, on fresh random buffers."""
    dev = torch.device(args.device)
    size = args.size_mib << 20
    out = []
    src = torch.randn(size // 4, device=dev)
    dst = torch.empty_like(src)
    out.append(("copy", "fp32", 2 * size, lambda: dst.copy_(src)))
    for name in args.dtypes.split(","):
        dt = DTYPES[name]
        n = size // torch.empty((), dtype=dt).element_size()
        a = torch.randn(n, device=dev).to(dt)
        b = torch.randn(n, device=dev).to(dt)
        out += [(row, name, 3 * size, fn) for row, fn in _reductions(a, b)]
    if args.device == "cuda":
        for mib in sorted({64, args.size_mib}):
            host = torch.empty(mib << 18, pin_memory=True)
            devb = torch.empty(mib << 18, device=dev)
            out += [(row, "fp32", mib << 20, fn) for row, fn in _pinned(host, devb, mib)]
            out += [(row, "fp32", 2 * (mib << 20), fn) for row, fn in _staged(devb, mib)]
    if args.codecs:
        x = torch.randn(args.codec_mib << 18, device=dev)
        residual = torch.randn(args.codec_mib << 18, device=dev) * 0.1
        for spec in args.codecs.split(","):
            out += [
                (row, "fp32", args.codec_mib << 20, fn)
                for row, fn in _codecs(spec, x, residual, args.codec_mib)
            ]
    return out


def check(args) -> None:
    """The kernels' sums and averages equal torch's on fresh random data (poisoned outputs
    would show): a wrong kernel must not be timed."""
    dev = torch.device(args.device)
    for name in args.dtypes.split(","):
        dt = DTYPES[name]
        a = torch.randn(1_000_003, device=dev).to(dt)
        b = torch.randn(1_000_003, device=dev).to(dt)
        mine = a.clone()
        _C._testing.reduce_into(mine, b, "sum")
        want = (a.float() + b.float()).to(dt)
        if not torch.equal(mine, want):
            raise SystemExit(f"scalecomm sum {name}: differs from torch's; nothing timed")
        _C._testing.divide_(mine, 2)
        tol = 0 if dt == torch.float32 else 1e-2
        if not torch.allclose(mine.float(), (want.float() / 2), rtol=tol, atol=tol):
            raise SystemExit(f"scalecomm avg {name}: differs from torch's; nothing timed")


def main(argv=None) -> int:
    args = parse_args(argv)
    check(args)
    clock = Clock(args.device)
    table = rows(args)
    times: dict[tuple[str, str], list[float]] = {(r[0], r[1]): [] for r in table}
    copy_bw: list[float] = []
    for rnd in range(args.rounds):
        k = rnd % len(table)
        for name, dt, _, fn in table[k:] + table[:k]:  # rotate: no row always first
            times[(name, dt)].append(clock.time(fn, args.iters))
        copy_bw.append(2 * (args.size_mib << 20) / times[("copy", "fp32")][-1])
    gpu = (
        torch.cuda.get_device_name() if args.device == "cuda" else "cpu (script check: not the GPU's numbers)"
    )
    print(
        f"# {gpu}, {args.size_mib} MiB buffers, {args.rounds} rounds x {args.iters} launches, "
        f"torch {torch.__version__}"
    )
    print("| row | dtype | us | GB/s | of copy | vs torch |")
    print("| --- | --- | --- | --- | --- | --- |")
    record = []
    for name, dt, nbytes, _ in table:
        ts = times[(name, dt)]
        med = statistics.median(ts)
        bw = nbytes / med / 1e9
        # Per round: this row's bandwidth over the copy's in the same round.
        if name.startswith("staged"):  # the pinned copies it is made of, per round
            mib = name.split()[-2]
            h2d, d2h = times[(f"pinned h2d {mib} MiB", dt)], times[(f"pinned d2h {mib} MiB", dt)]
            of_copy = statistics.median((a + b) / t for a, b, t in zip(h2d, d2h, ts, strict=True))
        elif "pinned" not in name and not name.startswith("codec"):
            of_copy = statistics.median(nbytes / t / c for t, c in zip(ts, copy_bw, strict=True))
        else:
            of_copy = None
        vs = ""
        if name.startswith("scalecomm"):
            other = times[("torch" + name[len("scalecomm") :], dt)]
            vs = f"{statistics.median(o / t for o, t in zip(other, ts, strict=True)):.2f}x"
        elif name.endswith(" on device"):
            other = times[(name[: -len(" on device")] + " staged", dt)]
            vs = f"{statistics.median(o / t for o, t in zip(other, ts, strict=True)):.2f}x"
        spread = f"{med * 1e6:.0f} [{min(ts) * 1e6:.0f}-{max(ts) * 1e6:.0f}]"
        print(
            f"| {name} | {dt} | {spread} | {bw:.0f} | {'' if of_copy is None else f'{of_copy:.2f}'} | {vs} |"
        )
        record.append(dict(row=name, dtype=dt, bytes=nbytes, seconds=ts, gbps=bw, of_copy=of_copy))
    print(
        "\nGB/s: the fewest bytes the row must move over its median time (copy and reductions: "
        "reads plus writes); of copy: over the copy's bandwidth in the same round; vs torch: "
        "torch's time over ours, paired per round (> 1: ours faster); codec rows: GB/s of the "
        "gradient encoded, and on device against staged through the host, paired per round; "
        "staged allreduce: its bytes down and up, of copy: the pinned h2d + d2h copies' time over its own."
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=gpu, size_mib=args.size_mib, rows=record), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
