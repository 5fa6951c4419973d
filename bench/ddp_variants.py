"""DDP variants side by side in one job: the same model trained as several
DDP copies in the same processes, in interleaved rounds of steps on the same
batches, each copy's median step against the first's (paired per round).

    python -m pyscalecomm.cluster --hosts 4 --rate 10gbit --cpus-per-host 0.45 -- \\
        python bench/ddp_variants.py --variants none,auto,bf16,none@ring,gloo
    torchrun --nproc-per-node 2 bench/ddp_variants.py --variants none,topk:0.01

A variant is a codec spec for scalecomm's DDP hook (``auto``, ``bf16``,
``topk:0.01``, ...; ``none``: no hook, DDP's own allreduce), each on a
scalecomm group of its own (its own tuning and compression state, as in a
job of its own), optionally with a fixed allreduce algorithm (``none@ring``,
``auto@direct``) and with ``+python`` for the hook as a Python function
(``auto+python``: ``hooks.compressed``; without it the C++ hook of
``hooks.register``), ``gloo`` (DDP on a gloo group of the same ranks), or
``local`` (the model without DDP: the same steps with no communication). The
first variant is the reference. Rounds alternate the variants' order, so
drift on a shared machine reaches every variant alike; the first round is
a warm-up and is dropped. Rank 0 prints, per variant, the median step with
the rounds' range, and the median over rounds of its step over the
reference's in the same round. Where epoch times of separate runs spread
more than the effect (shared cores, CPU-bound hosts), this is how a few
percent show.

Beside the step, each variant's compute: from a step's start to the
accumulation of its last gradient (the forward and the backward, which
DDP's bucket allreduces overlap; a codec's encoding runs inside it), the
slowest rank's mean per round. Against ``local``'s in the same round it says
how much the communication running beside the backward slows the compute
itself (what DDP then waits for after the backward is the rest of the step).

    torchrun --nproc-per-node 2 bench/ddp_variants.py --model mlp --width 2048 --variants local,gloo,none

For an ``auto`` variant rank 0 then prints each bucket's codec and why
(``pyscalecomm.compress.choices``) and how many calls ran each codec.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import pyscalecomm
import pyscalecomm.hooks
from pyscalecomm.train import data, models
from pyscalecomm.train.worker import GradClock


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--variants", default="none,auto", help="comma-separated; the first is the reference")
    p.add_argument("--model", default="transformer", choices=models.MODELS)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--data", default="digits", choices=data.DATASETS)
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank and step")
    p.add_argument("--rounds", type=int, default=15, help="rounds of every variant (the first is dropped)")
    p.add_argument("--steps", type=int, default=11, help="steps per variant and round")
    p.add_argument("--lr", type=float, default=0.05)
    return p.parse_args()


def parse_variant(name: str) -> tuple[str, str, bool]:
    """'auto@ring+python' -> (codec 'auto', algorithm 'ring', Python hook True)."""
    spec, python_hook = (name[: -len("+python")], True) if name.endswith("+python") else (name, False)
    codec, _, algorithm = spec.partition("@")
    return codec, algorithm, python_hook


def make_variant(name: str, model: nn.Module, lr: float):
    """(DDP module, optimizer) for one variant; raises ValueError naming a bad one."""
    if name == "local":  # the same steps with no communication
        return model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    codec, algorithm, python_hook = parse_variant(name)
    if codec == "gloo":
        if algorithm:
            raise ValueError(f"variant {name!r}: gloo takes no @algorithm")
        group = dist.new_group(backend="gloo")
    else:  # its own group: its own online tuning and compression state (keys per bucket index)
        options = pyscalecomm.Options(algorithm=algorithm) if algorithm else None
        group = dist.new_group(backend="scalecomm", pg_options=options)
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group)
    if codec in ("none", "gloo"):
        if python_hook:
            raise ValueError(f"variant {name!r}: +python names how a codec's hook runs; {codec} has none")
    elif python_hook:
        ddp.register_comm_hook(group, pyscalecomm.hooks.compressed(codec))
    else:
        pyscalecomm.hooks.register(ddp, codec)
    return ddp, torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)


def main() -> None:
    args = parse_args()
    if args.rounds < 2 or args.steps < 1:
        raise SystemExit("ddp_variants: --rounds must be >= 2 (the first is dropped) and --steps >= 1")
    torch.set_num_threads(1)
    dist.init_process_group("scalecomm")
    rank, world = dist.get_rank(), dist.get_world_size()
    d = data.load(args.data, args.model)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    variants, grads_done = {}, {}
    for name in names:
        torch.manual_seed(0)
        model = models.build(args.model, d.input_shape, d.classes, args.width)
        variants[name] = make_variant(name, model, args.lr)
        grads_done[name] = GradClock(model)
    loss_fn = nn.CrossEntropyLoss()
    n, b = len(d.train_x), args.batch_size
    times: dict[str, list[float]] = {name: [] for name in names}
    compute: dict[str, list[float]] = {name: [] for name in names}
    step = 0
    for rnd in range(args.rounds):
        for name in names if rnd % 2 == 0 else reversed(names):
            ddp, opt = variants[name]
            dist.barrier()
            t0 = time.perf_counter()
            spent = 0.0
            for s in range(args.steps):
                i = ((step + s) * world + rank) * b % max(n - b, 1)
                ts = time.perf_counter()
                opt.zero_grad()
                loss_fn(ddp(d.train_x[i : i + b]), d.train_y[i : i + b]).backward()
                spent += grads_done[name].last - ts
                opt.step()
            dist.barrier()  # the round's time ends with its slowest rank
            times[name].append((time.perf_counter() - t0) / args.steps * 1e3)
            compute[name].append(spent / args.steps * 1e3)
        step += args.steps
    for name in names:  # the slowest rank's compute per round
        c = torch.tensor(compute[name], dtype=torch.float64)
        dist.all_reduce(c, op=dist.ReduceOp.MAX)
        compute[name] = c.tolist()
    if rank == 0:
        ref = times[names[0]][1:]
        print(
            f"# {args.model} width {args.width}, {world} ranks, {args.rounds - 1} rounds of "
            f"{args.steps} steps (the first round dropped); step ms: median [range]; "
            f"vs {names[0]}: median of per-round ratios"
        )
        local = compute["local"][1:] if "local" in compute else None
        print(f"| variant | step ms | vs {names[0]} | compute ms | compute vs local |")
        print("|---|---:|---:|---:|---:|")
        for name in names:
            t, c = times[name][1:], compute[name][1:]
            ratio = statistics.median(a / r for a, r in zip(t, ref, strict=True))
            slowed = "-"
            if local is not None:
                per_round = [a / r for a, r in zip(c, local, strict=True)]
                slowed = f"{statistics.median(per_round):.3f} [{min(per_round):.2f}-{max(per_round):.2f}]"
            print(
                f"| {name} | {statistics.median(t):.1f} [{min(t):.1f}-{max(t):.1f}] | {ratio:.3f} "
                f"| {statistics.median(c):.1f} | {slowed} |"
            )
        for name in names:  # what compress=auto chose per bucket, and why
            if parse_variant(name)[0] == "auto":
                group = variants[name][0].process_group
                for c in pyscalecomm.compress.choices(group):
                    print(f"# {name} {c['key']}: {c['choice']} after {c['changes']} changes; {c['reason']}")
                ran = [s for s in pyscalecomm.stats(group) if ":auto:" in s["operation"]]
                for s in sorted(ran, key=lambda s: (s["operation"], s["bucket_bytes"])):
                    print(f"# {name} ran {s['operation']} (up to {s['bucket_bytes']} B): {s['calls']} calls")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
