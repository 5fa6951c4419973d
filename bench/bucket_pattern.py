"""DDP's two-bucket allreduce pattern without DDP: gloo and scalecomm in one job.

    sudo python -m pyscalecomm.cluster --hosts 2 --rate 1gbit -- python bench/bucket_pattern.py

Each step: compute (a busy matmul loop, or a sleep with ``--busy 0``) for
``--compute-ms``, post an allreduce of ``--big`` floats, compute 2 ms, post
one of ``--small`` floats (0: none), wait for both. These are the MLP's
buckets in docs/performance.md (16.9 MB posted, then 0.5 MB 2 ms later).
Backends alternate round by round so drift hits both. Every rank prints,
per backend, the mean step time of each round (the mean, not the median:
scalecomm's steps can alternate fast/slow between ranks, which a median
hides) and the process's CPU time over wall time of the timed steps (cores
used, compute included); ``--per-step`` also prints every timed step of the
last round.
"""

import argparse
import resource
import statistics
import time

import torch
import torch.distributed as dist

import pyscalecomm  # noqa: F401  (registers the backend)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--big", type=int, default=4227082, help="floats in the first allreduce")
    p.add_argument("--small", type=int, default=133120, help="floats in the second (0: none)")
    p.add_argument("--compute-ms", type=float, default=16)
    p.add_argument("--busy", type=int, default=1, help="1: compute with matmuls; 0: sleep")
    p.add_argument("--iters", type=int, default=12, help="steps per round (the first two are not timed)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backends", default="gloo,scalecomm")
    p.add_argument("--per-step", action="store_true", help="print each timed step of the last round")
    a = p.parse_args()
    if a.iters < 3:
        p.error("--iters must be at least 3 (two warm-up steps, then timed ones)")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    groups = {b: dist.new_group(backend=b) for b in a.backends.split(",")}
    big, small = torch.ones(a.big), torch.ones(a.small)
    w = torch.randn(512, 512)

    def compute(ms: float) -> None:
        t = time.perf_counter()
        if not a.busy:
            time.sleep(ms / 1e3)
            return
        while time.perf_counter() - t < ms / 1e3:
            w.mm(w[:, :64])

    steps = {b: [] for b in groups}
    cores = {b: [] for b in groups}
    last = {}
    for _ in range(a.rounds):
        for b, g in groups.items():
            dist.barrier(group=g)
            ts = []
            c0 = None
            for i in range(a.iters):
                if i == 2:  # the first two steps are warm-up: neither timed nor counted in cores
                    c0 = resource.getrusage(resource.RUSAGE_SELF)
                t = time.perf_counter()
                compute(a.compute_ms)
                first = dist.all_reduce(big, group=g, async_op=True)
                if a.small:
                    compute(2)
                    dist.all_reduce(small, group=g, async_op=True).wait()
                first.wait()
                ts.append(time.perf_counter() - t)
            c1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
            cores[b].append(cpu / sum(ts[2:]))
            steps[b].append(1e3 * statistics.mean(ts[2:]))
            last[b] = ts[2:]
    rank = dist.get_rank()
    for b in groups:
        print(
            f"rank {rank} {b:>9}  step ms "
            + " ".join(f"{x:6.1f}" for x in steps[b])
            + "  cores "
            + " ".join(f"{x:.2f}" for x in cores[b]),
            flush=True,
        )
        if a.per_step:
            print(
                f"rank {rank} {b:>9}  last round, each step ms "
                + " ".join(f"{1e3 * x:.0f}" for x in last[b]),
                flush=True,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
