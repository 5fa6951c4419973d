"""What auto's online exploration costs a DDP run: the share of its communication time.

    torchrun --nproc-per-node 2 bench/autotune_cost.py --steps 1000

Trains an MLP (64-2048-2048-10 by default, 16.6 MiB of gradients) with DDP on
scalecomm for --steps steps, every gradient in one bucket (one allreduce per
step, one size bucket of auto's), starting from no tuning cache
(SCALECOMM_TUNING_FILE=none unless set). Then, from the group's own
accounting (``tuning()`` and ``stats()``, this rank's clock):

- exploration cost = the trials' time - trials x the winner's mean trial
  time (the same rounds, interleaved, so the same conditions; while the
  first exploration is still paced, the leader's) + the time of the ranks'
  agreements (screens, decisions, drift checks);
- communication time = every allreduce's time + the agreements.

Rank 0 prints both and their ratio for each rank (the issue's budget: 2 %).
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pyscalecomm  # noqa: F401  (registers the backend)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    os.environ.setdefault("SCALECOMM_TUNING_FILE", "none")
    os.environ.setdefault("SCALECOMM_AUTOTUNE", "online")
    dist.init_process_group("scalecomm")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, args.width),
        torch.nn.ReLU(),
        torch.nn.Linear(args.width, args.width),
        torch.nn.ReLU(),
        torch.nn.Linear(args.width, 10),
    )
    grad_bytes = sum(q.numel() * 4 for q in model.parameters())
    cap_mb = grad_bytes / 2**20 + 1
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(cap_mb * 2**20)  # the first bucket too: one bucket
    ddp = DDP(model, bucket_cap_mb=cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(args.steps):
        x = torch.randn(args.batch_size, 64, generator=gen)
        y = torch.randint(0, 10, (args.batch_size,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    stats = {k: v for k, v in be.stats().items() if k.startswith("allreduce")}
    tuning = [b for b in be.tuning() if b["calls"] > 0]
    comm = sum(v["seconds"] for v in stats.values())
    agreements = sum(b["agreement_s"] for b in tuning)
    cost = agreements
    lines = []
    for b in tuning:
        # The reference: the winner; while the first exploration goes on, the leader its pauses run.
        ref = b["algorithm"] if b["phase"] == "exploiting" else b["leader"]
        means = {c["algorithm"]: c["trial_s"] / c["trials"] for c in b["candidates"] if c["trials"]}
        mean = means.get(ref, min(means.values(), default=0.0))  # no trial of it yet: the fastest mean
        cost += b["trial_s"] - b["trials"] * mean
        lines.append(
            f"bucket <= {b['bytes']} B: {b['calls']} calls, {b['phase']}, "
            f"{'winner' if b['phase'] == 'exploiting' else 'leader'} {ref} ({mean * 1e3:.3f} ms mean trial), "
            f"{b['trials']} trials in {b['trial_s'] * 1e3:.1f} ms, {b['paced']} paced calls, "
            f"{b['explorations']} exploration(s), {b['drift_checks']} drift checks, "
            f"agreements {b['agreement_s'] * 1e3:.2f} ms"
        )
    out = torch.tensor([cost, comm + agreements], dtype=torch.float64)
    everyone = [torch.zeros(2, dtype=torch.float64) for _ in range(n)]
    dist.all_gather(everyone, out)
    if rank == 0:
        print(f"# {args.steps} DDP steps, {n} ranks, {grad_bytes / 2**20:.1f} MiB of gradients in one bucket")
        for line in lines:
            print("# " + line)
        for r, t in enumerate(everyone):
            print(
                f"rank {r}: exploration cost {t[0].item() * 1e3:.1f} ms of {t[1].item():.2f} s communication "
                f"= {100 * t[0].item() / t[1].item():.2f} %"
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
