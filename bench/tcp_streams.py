"""TCP between two hosts: scalecomm's allreduce against what plain sockets achieve.

    python -m pyscalecomm.cluster --hosts 2 --rate 10gbit -- python bench/tcp_streams.py

Run once per rank with RANK, WORLD_SIZE (2), MASTER_ADDR and MASTER_PORT set
(the emulated cluster sets them). In interleaved rounds it measures, on the
same pair of hosts:

- the yardstick: plain TCP sockets moving the same bytes both ways at once,
  as a 2-rank ring allreduce does (each rank sends and receives `size` bytes),
  over 1 and over N streams (bench/cpp/tcp_yardstick.cc, C++: one blocking
  sender and one receiver thread per stream, the bytes split evenly over the
  streams; build it with `cmake -S . -B build/cpp -G Ninja && cmake --build
  build/cpp --target tcp_yardstick`);
- scalecomm's ring allreduce of `size` bytes (float32 sum) in one process group
  per value of sockets_per_peer;
- gloo's allreduce, for reference.

For each it prints per-direction throughput (GB/s): for the yardstick bytes /
time, for an allreduce its busbw (at 2 ranks, bytes / time: the bytes each rank
sends), as medians with the min-max spread over rounds, and each allreduce as
a share of the best yardstick. Rank 0 prints; --json appends the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="64M", help="bytes per allreduce and yardstick exchange (default 64M)")
    p.add_argument("--streams", default="1,2,4", help="yardstick stream counts (default 1,2,4)")
    p.add_argument("--sockets", default="1,2,4", help="scalecomm sockets_per_peer values (default 1,2,4)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=3, help="timed repetitions per round and row")
    p.add_argument("--no-gloo", action="store_true")
    p.add_argument("--json", default="", help="append one JSON row per measurement to this file")
    p.add_argument("--yardstick", default="build/cpp/tcp_yardstick", help="the raw-socket yardstick binary")
    p.add_argument(
        "--modes", default="poll", help="yardstick drivers: poll (one thread), threads (two per stream), both"
    )
    return p.parse_args(argv)


def yardstick(binary: str, mode: str, rank: int, peer: str, port: int, streams: int, size: int, iters: int):
    """Mean seconds per exchange of plain sockets (bench/cpp/tcp_yardstick.cc),
    run on both ranks at once: rank 0 listens, rank 1 connects."""
    import subprocess

    import torch.distributed as dist

    args = [str(streams), str(size), str(iters)]
    if rank == 0:
        cmd = [binary, mode, "listen", str(port), *args]
    else:
        cmd = [binary, mode, "connect", peer, str(port), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dist.barrier()  # both started (the connecting end retries until the listener is up)
    out, err = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"rank {rank}: {' '.join(cmd)} failed: {err.strip()}")
    times = [float(t) for t in out.split()[1:]]
    return sum(times) / len(times)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    import pyscalecomm
    from pyscalecomm.bench import parse_size

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if world != 2:
        raise SystemExit("tcp_streams.py runs on exactly 2 ranks (one per host)")
    size = parse_size(args.size)
    streams = [int(s) for s in args.streams.split(",") if s]
    sockets = [int(s) for s in args.sockets.split(",") if s]

    if not os.access(args.yardstick, os.X_OK):
        raise SystemExit(
            f"no yardstick at {args.yardstick}: build it with "
            "cmake -S . -B build/cpp -G Ninja && cmake --build build/cpp --target tcp_yardstick"
        )
    dist.init_process_group("gloo")  # the store, the barrier and the gloo row
    peer_addr = os.environ["MASTER_ADDR"]
    ports = iter(range(int(os.environ["MASTER_PORT"]) + 101, 1 << 16))  # a fresh port per run: no TIME_WAIT
    groups = {
        k: dist.new_group(
            backend="scalecomm", pg_options=pyscalecomm.Options(algorithm="ring", sockets_per_peer=k)
        )
        for k in sockets
    }
    x = torch.ones(size // 4)
    rows: dict[str, list[float]] = {}

    def timed(fn) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            fn()
        return (time.perf_counter() - t0) / args.iters

    def record(name: str, seconds: float) -> None:
        rows.setdefault(name, []).append(size / seconds / 1e9)

    for g in groups.values():  # warm every path once
        dist.all_reduce(x, group=g)
    if not args.no_gloo:
        dist.all_reduce(x)
    for _ in range(args.rounds):
        for mode in args.modes.split(","):
            for n in streams:
                seconds = yardstick(args.yardstick, mode, rank, peer_addr, next(ports), n, size, args.iters)
                record(f"raw tcp {mode}, {n} stream{'s' if n > 1 else ''}", seconds)
        for k, g in groups.items():
            seconds = timed(lambda g=g: dist.all_reduce(x, group=g))
            record(f"scalecomm ring, {k} socket{'s' if k > 1 else ''} per peer", seconds)
        if not args.no_gloo:
            record("gloo", timed(lambda: dist.all_reduce(x)))

    for k, g in groups.items():  # every path's result, once more after timing
        y = torch.arange(size // 4, dtype=torch.float32) % 1000 * (rank + 1)
        dist.all_reduce(y, group=g)
        want = torch.arange(size // 4, dtype=torch.float32) % 1000 * 3
        if not torch.equal(y, want):
            raise SystemExit(f"rank {rank}: scalecomm with {k} sockets per peer returned a wrong sum")

    if rank == 0:
        best = max(statistics.median(v) for k, v in rows.items() if k.startswith("raw"))
        print(
            f"# {size} bytes each way, float32 sum, {args.rounds} rounds x {args.iters} iterations, "
            f"GB/s per direction (median [min-max]); share: of the best raw median ({best:.3f})"
        )
        print(f"{'path':<40} {'GB/s':>8} {'spread':>15} {'share':>6}")
        for name, v in rows.items():
            med = statistics.median(v)
            print(f"{name:<40} {med:8.3f} {f'[{min(v):.3f}-{max(v):.3f}]':>15} {med / best:6.0%}")
            if args.json:
                with open(args.json, "a") as f:
                    f.write(
                        json.dumps(
                            {
                                "path": name,
                                "bytes": size,
                                "GBps_median": med,
                                "GBps_min": min(v),
                                "GBps_max": max(v),
                                "share_of_best_raw": med / best,
                            }
                        )
                        + "\n"
                    )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
