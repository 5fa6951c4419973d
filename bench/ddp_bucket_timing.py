"""A/B of DDP steps on gloo and scalecomm in one job, with per-bucket allreduce times.

    sudo python -m pyscalecomm.cluster --hosts 2 --rate 1gbit -- python bench/ddp_bucket_timing.py

Each backend trains the same MLP (64-2048-2048-10, 16.6 MiB of gradients)
for 12 steps, natively and with a timing comm hook that does what DDP's
default does (divide, allreduce SUM) and records, per bucket, the time from
the hook call to the future's completion. Alternates backends so drift on a
shared machine hits both. Rank 0 prints the mean step and bucket times
(means, not medians: steps that alternate fast and slow between the ranks,
as scalecomm's did before pacing, are hidden by a median; see
docs/performance.md, "Pacing").
``--bucket-cap-mb 64`` puts all gradients in one bucket (one allreduce per
step), which separates the cost of DDP running two collectives from the cost
of one. ``--two-groups`` adds a run whose hook spreads the buckets over two
scalecomm groups (bucket i on group i % 2), so consecutive buckets' allreduces
run concurrently, as gloo runs them.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pyscalecomm  # noqa: F401  (registers the backend)


def run(backend: str, timed_hook: bool, n: int, bucket_cap_mb: float | None, groups: int = 1) -> str:
    gs = [dist.new_group(backend=backend) for _ in range(groups)]
    g = gs[0]
    torch.manual_seed(0)
    width = 2048
    m = torch.nn.Sequential(
        torch.nn.Linear(64, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 10),
    )
    d = DDP(m, process_group=g, bucket_cap_mb=bucket_cap_mb)
    times = []

    def hook(state, bucket):
        t0 = time.perf_counter()
        buf = bucket.buffer().div_(n)
        fut = dist.all_reduce(buf, group=gs[bucket.index() % groups], async_op=True).get_future()

        def done(f):
            times.append((buf.numel(), time.perf_counter() - t0))
            return f.value()[0]

        return fut.then(done)

    if timed_hook:
        d.register_comm_hook(None, hook)
    opt = torch.optim.SGD(d.parameters(), lr=0.01)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    steps = []
    for _ in range(12):
        t = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(d(x), y).backward()
        opt.step()
        steps.append(time.perf_counter() - t)
    for one in gs:
        dist.destroy_process_group(one)
    mode = ("hook" if groups == 1 else f"hook x{groups} groups") if timed_hook else "native"
    line = f"{backend:>9} {mode:>6}  step {1e3 * statistics.mean(steps[2:]):6.1f} ms"
    big = [t for e, t in times[4:] if e > 1_000_000]
    small = [t for e, t in times[4:] if e <= 1_000_000]
    if big and small:
        line += f"  big bucket {1e3 * statistics.mean(big):6.1f} ms"
        line += f"  small bucket {1e3 * statistics.mean(small):6.1f} ms"
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--bucket-cap-mb",
        type=float,
        default=None,
        help="DDP bucket_cap_mb (default: DDP's, a 1 MiB first bucket then 25)",
    )
    p.add_argument("--two-groups", action="store_true", help="also time a hook over two scalecomm groups")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    n = dist.get_world_size()
    for timed_hook in (False, True, False):
        runs = [("gloo", 1), ("scalecomm", 1)] + (
            [("scalecomm", 2)] if timed_hook and args.two_groups else []
        )
        for backend, groups in runs:
            line = run(backend, timed_hook, n, args.bucket_cap_mb, groups)
            if dist.get_rank() == 0:
                print(line, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
