"""Compressed allreduce time per codec in two builds, measured in one job.

    python bench/codec_builds.py --a /path/to/old/checkout --b /path/to/new/checkout \\
        --rounds 5 --sizes 256K,16M

Each round runs one 2-rank job (shared memory) per build, alternating which
goes first; a job times `pyscalecomm.allreduce(x, codec, key=...)` per codec
and size (median of --calls calls after 3 warm-up calls, barrier before
each); the codec `none` times the uncompressed `dist.all_reduce` instead. A
build is a checkout with its extension built in place (python setup.py
build_ext --inplace); it is put first on PYTHONPATH. Prints, per codec and
size, each build's median over the rounds and the median and range of the
per-round ratio a/b (above 1: b is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CODECS = "fp16,bf16,topk:0.01,topk_sampled:0.01,randomk:0.01,qsgd:8,sign,powersgd:4"


def _bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def _worker(rank, port, codecs, sizes, calls, queue):
    # An editable install's finder could import that build instead of the checkout.
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    import torch
    import torch.distributed as dist

    import pyscalecomm

    if not pyscalecomm.__file__.startswith(os.environ["PYTHONPATH"]):
        raise SystemExit(f"pyscalecomm came from {pyscalecomm.__file__}, not {os.environ['PYTHONPATH']}")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("scalecomm", rank=rank, world_size=2)
    out = {}
    for nbytes in sizes:
        x = torch.randn(max(1, nbytes // 4), generator=torch.Generator().manual_seed(rank))
        for codec in codecs:
            y = x.clone()

            def call(y=y, codec=codec, nbytes=nbytes):
                if codec == "none":
                    dist.all_reduce(y)
                else:
                    pyscalecomm.allreduce(y, codec, key=f"{codec}@{nbytes}")

            for _ in range(3):
                y.copy_(x)
                call()
            times = []
            for _ in range(calls):
                y.copy_(x)  # the same gradient each call: a sum in place would grow until it overflows
                dist.barrier()
                t = time.perf_counter()
                call()
                times.append(time.perf_counter() - t)
            out[f"{codec}@{nbytes}"] = statistics.median(times)
    if rank == 0:
        queue.put(out)
    dist.destroy_process_group()


def _job(codecs, sizes, calls):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = 29500 + os.getpid() % 2000
    procs = [ctx.Process(target=_worker, args=(r, port, codecs, sizes, calls, queue)) for r in range(2)]
    for p in procs:
        p.start()
    result = queue.get(timeout=900)
    for p in procs:
        p.join()
    print(json.dumps(result))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="checkout of the first build")
    ap.add_argument("--b", required=True, help="checkout of the second build")
    ap.add_argument("--codecs", default=CODECS)
    ap.add_argument("--sizes", default="256K,16M", help="message sizes in bytes (K, M suffixes)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    codecs, sizes = args.codecs.split(","), [_bytes(s) for s in args.sizes.split(",")]
    if args.job:
        _job(codecs, sizes, args.calls)
        return
    builds = {"a": args.a, "b": args.b}
    times = {name: {} for name in builds}
    for r in range(args.rounds):
        order = list(builds) if r % 2 == 0 else list(reversed(builds))
        for name in order:
            env = dict(
                os.environ, PYTHONPATH=os.path.abspath(builds[name]), TORCH_DEVICE_BACKEND_AUTOLOAD="0"
            )
            cmd = [sys.executable, os.path.abspath(__file__), "--a", args.a, "--b", args.b, "--job"]
            cmd += ["--codecs", args.codecs, "--sizes", args.sizes, "--calls", str(args.calls)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                sys.exit(f"build {name} ({builds[name]}) failed:\n{done.stderr[-3000:]}")
            for key, seconds in json.loads(done.stdout.strip().splitlines()[-1]).items():
                times[name].setdefault(key, []).append(seconds)
    print("| codec @ bytes | a ms | b ms | a/b median | a/b range |\n| --- | ---: | ---: | ---: | --- |")
    for key in times["a"]:
        a, b = times["a"][key], times["b"][key]
        ratios = sorted(x / y for x, y in zip(a, b, strict=True))
        print(
            f"| {key} | {statistics.median(a) * 1e3:.3f} | {statistics.median(b) * 1e3:.3f} "
            f"| {statistics.median(ratios):.2f} | {ratios[0]:.2f}-{ratios[-1]:.2f} |"
        )


if __name__ == "__main__":
    main()
