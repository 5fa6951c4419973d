"""The parameter server's throughput against its number of server shards.

    torchrun --nproc-per-node 4 bench/ps_throughput.py --mib 16 --steps 20 --rounds 3

Every rank is a worker; for S = 1 .. world servers (ranks 0..S-1), a model of
--keys parameters totalling --mib MiB of float32 runs --steps steps of
pushes and pulls in ``async`` mode (a push answered at once, so the servers'
handling is the bound, not a barrier), with a trivial forward and backward
(every gradient 1). Server counts are interleaved in rounds, so drift hits
them alike; per S the median over rounds of:

- step ms: the slowest rank's time per step (push every shard, pull every shard);
- requests/s: pushes + pulls handled per second, all servers together;
- GB/s: bytes pushed + pulled per second, all servers together.

``--backend gloo`` runs the same over gloo.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

import pyscalecomm  # noqa: F401  (registers the backend)
from pyscalecomm.ps import ParameterServer


class Keys(nn.Module):
    def __init__(self, keys: int, numel: int):
        super().__init__()
        self.ps = nn.ParameterList(nn.Parameter(torch.zeros(numel)) for _ in range(keys))

    def forward(self):
        return sum(p.sum() for p in self.ps)


def run(servers: int, args, numel: int) -> float:
    model = ParameterServer(
        Keys(args.keys, numel), servers=servers, mode="async", optimizer="sgd", lr=1e-6, backend=args.backend
    )
    for _ in range(2):  # warm-up
        model().backward()
    model.refresh()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        model().backward()
    model.refresh()
    mine = torch.tensor([(time.perf_counter() - t0) / args.steps], dtype=torch.float64)
    model.close()
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=float, default=16.0, help="model size in MiB of float32")
    p.add_argument("--keys", type=int, default=16, help="parameters (keys), of equal size")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backend", default="scalecomm")
    args = p.parse_args()
    dist.init_process_group("gloo")  # coordination; the servers' groups use --backend
    n = dist.get_world_size()
    numel = max(1, int(args.mib * 2**20 / 4 / args.keys))
    times: dict[int, list[float]] = {s: [] for s in range(1, n + 1)}
    for _ in range(args.rounds):
        for s in times:
            times[s].append(run(s, args, numel))
    if dist.get_rank() == 0:
        nbytes = 4 * numel * args.keys
        print(f"# {n} workers, {args.keys} keys, {nbytes / 2**20:.1f} MiB, backend {args.backend}, async")
        print(f"# {args.steps} steps, median of {args.rounds} interleaved rounds [min-max]")
        print("| servers | step ms | requests/s | GB/s (push + pull) |")
        print("|---:|---:|---:|---:|")
        for s, ts in times.items():
            t = statistics.median(ts)
            requests = 2 * n * s / t  # every worker pushes and pulls every shard each step
            moved = 2 * n * nbytes / t
            print(
                f"| {s} | {1e3 * t:.1f} [{1e3 * min(ts):.1f}-{1e3 * max(ts):.1f}] | {requests:.0f} "
                f"| {moved / 1e9:.2f} |"
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
