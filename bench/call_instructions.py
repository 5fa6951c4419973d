"""Instructions per small allreduce, counted by callgrind (deterministic,
unlike time on a shared VM).

    python bench/call_instructions.py                       # this checkout
    python bench/call_instructions.py --builds /old /new    # two checkouts, side by side

Each build runs one process with a world-1 scalecomm group under
`valgrind --tool=callgrind --collect-atstart=no`, collection on only inside
`ScalecommBackend::allreduce`, `ScalecommWork::wait` and `~ScalecommWork`
(our side of the call: Python and torch's dispatch are not counted). It
makes --warmup plus --calls synchronous `dist.all_reduce` calls of
--bytes; the count is divided by all of them. A build is a checkout with
its extension built in place (python setup.py build_ext --inplace).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

TOGGLES = ["*ScalecommBackend::allreduce(*", "*ScalecommWork::wait(*", "*ScalecommWork::~ScalecommWork*"]


def _loop(nbytes: int, warmup: int, calls: int) -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    import torch
    import torch.distributed as dist

    import pyscalecomm  # noqa: F401  (registers the backend)

    dist.init_process_group("scalecomm", store=dist.HashStore(), rank=0, world_size=1)
    x = torch.ones(max(1, nbytes // 4))
    for _ in range(warmup + calls):
        dist.all_reduce(x)
    dist.destroy_process_group()


def _count(build: str, nbytes: int, warmup: int, calls: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}"]
        cmd += [f"--toggle-collect={t}" for t in TOGGLES]
        cmd += [sys.executable, os.path.abspath(__file__), "--loop", "--bytes", str(nbytes)]
        cmd += ["--warmup", str(warmup), "--calls", str(calls)]
        env = dict(os.environ, PYTHONPATH=os.path.abspath(build), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            sys.exit(f"{build}: valgrind failed:\n{done.stderr[-3000:]}")
        files = glob.glob(out + "*")
        total = 0
        for f in files:
            with open(f) as fh:
                m = re.search(r"^summary:\s+(\d+)", fh.read(), re.M)
            total += int(m.group(1)) if m else 0
        return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", nargs="+", default=["."], help="checkouts to count (default: this one)")
    ap.add_argument("--bytes", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.loop:
        _loop(args.bytes, args.warmup, args.calls)
        return
    n = args.warmup + args.calls
    print(f"| build | instructions ({n} calls of {args.bytes} B) | per call |\n| --- | ---: | ---: |")
    for build in args.builds:
        total = _count(build, args.bytes, args.warmup, args.calls)
        print(f"| {build} | {total:,} | {total / n:,.0f} |")


if __name__ == "__main__":
    main()
