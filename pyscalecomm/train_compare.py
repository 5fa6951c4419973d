"""DDP training on real data with scalecomm and with gloo, side by side.

    python -m pyscalecomm.train_compare --nproc 2

Trains the same MLP with DistributedDataParallel on scikit-learn's digits data
set (1,797 8x8 images, shipped with scikit-learn: nothing is downloaded), once
over scalecomm and once over gloo, in the same processes, from the same
initial weights and the same data order. Prints wall time, time per step,
throughput (samples/s), scalecomm's speedup over gloo, final loss, test
accuracy and the largest weight difference between the two runs.
"""

from __future__ import annotations

import argparse
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m pyscalecomm.train_compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nproc", type=int, default=0, help="spawn this many local ranks (no launcher needed)")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--backends", default="scalecomm,gloo")
    return p.parse_args(argv)


def _data(torch):
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise SystemExit("train_compare needs scikit-learn (pip install scikit-learn)") from e
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y, dtype=torch.int64)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(x), generator=g)
    split = int(0.8 * len(x))
    return (x[perm[:split]], y[perm[:split]]), (x[perm[split:]], y[perm[split:]])


def _train(args, group, torch, dist, train, test):
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    model = nn.Sequential(
        nn.Linear(64, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, 10),
    )
    ddp = DDP(model, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    xs, ys = train
    steps = 0
    dist.barrier(group=group)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(epoch)
        order = torch.randperm(len(xs), generator=g)
        per_step = args.batch_size * n
        for s in range(len(xs) // per_step):
            idx = order[s * per_step + rank * args.batch_size : s * per_step + (rank + 1) * args.batch_size]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(ddp(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            steps += 1
    dist.barrier(group=group)
    wall = time.perf_counter() - start
    with torch.no_grad():
        acc = (model(test[0]).argmax(1) == test[1]).float().mean().item()
        final_loss = nn.functional.cross_entropy(model(xs), ys).item()
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    samples = steps * args.batch_size * n
    return {
        "wall": wall,
        "steps": steps,
        "step_ms": 1000 * wall / max(steps, 1),
        "samples_s": samples / wall,
        "loss": final_loss,
        "acc": acc,
        "weights": weights,
    }


def run(args) -> None:
    import torch
    import torch.distributed as dist

    import pyscalecomm  # noqa: F401

    torch.set_num_threads(1)
    backends = [b for b in args.backends.split(",") if b]
    dist.init_process_group(backends[0])
    groups = {backends[0]: dist.group.WORLD}
    for b in backends[1:]:
        groups[b] = dist.new_group(backend=b)
    train, test = _data(torch)
    results = {b: _train(args, groups[b], torch, dist, train, test) for b in backends}
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(
            f"# DDP on sklearn digits: {n} ranks, MLP 64-{args.hidden}-{args.hidden}-10, "
            f"{args.epochs} epochs, batch {args.batch_size}/rank"
        )
        print(
            f"{'backend':>10} {'steps':>6} {'wall(s)':>8} {'ms/step':>8} {'samples/s':>10} "
            f"{'speedup':>8} {'loss':>8} {'test acc':>9}"
        )
        base = results[backends[-1]]["wall"]
        for b in backends:
            r = results[b]
            print(
                f"{b:>10} {r['steps']:>6} {r['wall']:>8.2f} {r['step_ms']:>8.2f} {r['samples_s']:>10.0f} "
                f"{base / r['wall']:>7.2f}x {r['loss']:>8.4f} {r['acc']:>9.3f}"
            )
        if len(backends) > 1:
            diff = (results[backends[0]]["weights"] - results[backends[1]]["weights"]).abs().max().item()
            print(
                f"# max |w_{backends[0]} - w_{backends[1]}| = {diff:.3g} "
                f"({'bit-identical' if diff == 0 else 'summation order differs'})"
            )
    dist.destroy_process_group()


def main(argv=None) -> int:
    from pyscalecomm.launch import main_with_launcher

    return main_with_launcher("pyscalecomm.train_compare", parse_args(argv), argv, run)


if __name__ == "__main__":
    sys.exit(main())
