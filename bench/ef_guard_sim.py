"""What top-k with error feedback holds back, and what it costs in accuracy,
simulated in one process: the training driver's model and data, W ranks'
gradients of their own batches (one flat bucket per rank), each rank's
top-k with its own residual, the mean of what they send, SGD with momentum
0.9 at the driver's learning rate. It prints the final test accuracy and,
per phase of training, the statistic compress="auto"'s accuracy guard
reads: each rank's residual over its own recent gradient (its inputs summed
with a decay of 1 - 1/64 per step), the ranks' maximum.

    python bench/ef_guard_sim.py --model transformer --width 128 --epochs 5 --ratio 0.01
    python bench/ef_guard_sim.py --model mlp --width 2048 --epochs 8 --ratio 0.03 --start 64

--ratio none trains uncompressed; --start S sends exactly (no codec) for the
first S steps, as auto's warm-up does. One thread; the MLP at width 2048
takes a few minutes. A single seed: accuracies within about a point of each
other are not told apart by one run.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from pyscalecomm.train import data as train_data
from pyscalecomm.train import models

WINDOW_CALLS = 64  # as kAutoWindowCalls (csrc/compress/auto_select.h)


def simulate(model_name: str, width: int, epochs: int, ratio: float | None, start: int, ranks: int = 4,
             batch: int = 16, lr: float = 0.05, seed: int = 0) -> tuple[float, list[float]]:  # fmt: skip
    """Final test accuracy and the guard's statistic per step (0 where nothing is held back)."""
    torch.manual_seed(seed)
    d = train_data.load("digits", model_name)
    model = models.build(model_name, d.input_shape, d.classes, width)
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    opt = torch.optim.SGD(params, lr=lr, momentum=0.9)
    residual = [torch.zeros(n) for _ in range(ranks)]
    window = [torch.zeros(n) for _ in range(ranks)]
    order = torch.Generator().manual_seed(seed)
    per_step = batch * ranks
    steps_per_epoch = len(d.train_x) // per_step
    loss_fn = torch.nn.CrossEntropyLoss()
    held = []
    step = 0
    for _ in range(epochs):
        perm = torch.randperm(len(d.train_x), generator=order)
        for s in range(steps_per_epoch):
            grads = []
            for r in range(ranks):
                idx = perm[s * per_step + r * batch : s * per_step + (r + 1) * batch]
                model.zero_grad()
                loss_fn(model(d.train_x[idx]), d.train_y[idx]).backward()
                grads.append(torch.cat([p.grad.reshape(-1) for p in params]))
                window[r].mul_(1 - 1 / WINDOW_CALLS).add_(grads[r])
            if ratio is None or step < start:  # exact: gradient + residual, the residual emptied
                sent = [g + e for g, e in zip(grads, residual, strict=True)]
                residual = [torch.zeros(n) for _ in range(ranks)]
                held.append(0.0)
            else:
                k = max(1, int(n * ratio))
                sent = []
                for r in range(ranks):
                    c = grads[r] + residual[r]
                    keep = torch.zeros(n)
                    top = c.abs().topk(k, sorted=False).indices
                    keep[top] = c[top]
                    residual[r] = c - keep
                    sent.append(keep)
                held.append(max(float(residual[r].norm() / window[r].norm()) for r in range(ranks)))
            mean = torch.stack(sent).mean(0)
            offset = 0
            for p in params:
                p.grad = mean[offset : offset + p.numel()].view_as(p).clone()
                offset += p.numel()
            opt.step()
            step += 1
    with torch.no_grad():
        accuracy = float((model(d.test_x).argmax(1) == d.test_y).float().mean())
    return accuracy, held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="transformer", choices=("mlp", "transformer"))
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--ratio", default="0.01", help="top-k's share of values kept, or none")
    ap.add_argument("--start", type=int, default=0, help="exact steps before the codec starts")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ratio = None if args.ratio == "none" else float(args.ratio)
    accuracy, held = simulate(args.model, args.width, args.epochs, ratio, args.start)
    third = max(1, len(held) // 3)
    phases = [statistics.median(held[i * third : (i + 1) * third] or [0.0]) for i in range(3)]
    print(
        f"{args.model} width {args.width}, top-k {args.ratio} from step {args.start}: "
        f"accuracy {accuracy:.3f}; residual / recent gradient (median per third of the run): "
        + ", ".join(f"{p:.2f}" for p in phases)
    )


if __name__ == "__main__":
    main()
