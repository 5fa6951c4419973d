"""Predicts each parallelism strategy's step time and model-state memory
before anything runs, from measured compute and an alpha-beta link model.

Inputs:
- the model's profile (:func:`profile`): the forward + backward time of the
  global batch on one process, split over the layers in proportion to each
  layer's measured forward time; each layer's parameter count; the
  activation each layer hands to the next (bytes per sample); the
  tensor-parallel pairs (column- then row-wise Linear layers) with their
  widths;
- the link (:class:`Link`): latency alpha (s per message) and inverse
  bandwidth beta (s per byte);
- the machine: cores. Compute takes the longer of the critical path (the
  slowest rank's share; a pipeline's slots) and all ranks' work over the
  ranks the cores run at once (a work-conserving scheduler: a pipeline's
  idle stages leave their cores to the busy one).

Collective costs are the ring's (the bandwidth-optimal schedule every
backend uses at these sizes): allreduce of n bytes over p ranks
2(p-1) alpha + 2(p-1)/p n beta; all-gather and reduce-scatter
(p-1) alpha + (p-1)/p n beta; a point-to-point message alpha + n beta.

Step time, data-parallel degree D and model-parallel degree M (T = compute
of the global batch on one process, P = parameter bytes):
- allreduce (DDP): T/D + allreduce(P, D) (no credit for overlap with backward);
- fsdp: T/D + per sharded unit two all-gathers and one reduce-scatter of its
  parameters over D;
- tp: T/M + per tensor-parallel pair an allreduce of its output (forward)
  and of its input gradient (backward), over M, of the batch's activations;
- pp (S = M stages, m microbatches): (m + S - 1) x (the slowest stage's
  compute per microbatch + the largest boundary activation sent forward and
  its gradient back), the pipeline's fill and drain included;
- dp+tp: tp's terms on the batch share 1/D, plus fsdp's over D of P/M;
- dp+pp: pp's on the batch share 1/D, plus allreduce over D of the largest
  stage's parameters.
Memory: parameters, gradients and SGD momentum (3 x 4 bytes a parameter) a
rank holds.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    alpha: float  # s per message
    beta: float  # s per byte
    name: str = ""


def link_for(cluster_rate: str | None) -> Link:
    """The link ranks of a run meet over: an emulated cluster's capped link
    (its rate; alpha measured on its veth pairs, about 60 us a message
    through TCP), or shared memory on one host (alpha about 10 us a message;
    beta from a memcpy measured here)."""
    if cluster_rate:
        from pyscalecomm.units import parse_rate

        return Link(60e-6, 1.0 / parse_rate(cluster_rate), f"{cluster_rate} links")
    return Link(10e-6, 1.0 / memcpy_rate(), "shared memory")


def memcpy_rate(nbytes: int = 32 << 20) -> float:
    """Bytes per second of one large copy on this machine (the best of five)."""
    import torch

    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


def median_step_s(step, repeats: int, warmup: int = 2, sync=lambda: None, on_warm=lambda: None) -> float:
    """Median seconds of ``step(k)`` over ``repeats`` calls (0.0 for none),
    after ``warmup`` untimed ones; ``on_warm()`` runs between the two, and
    ``sync()`` before and after each call waits for a device."""
    times = []
    for k in range(warmup + repeats):
        if k == warmup:
            on_warm()
        sync()
        t0 = time.perf_counter()
        step(k)
        sync()
        if k >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times) if times else 0.0


@dataclass
class Profile:
    """What the predictor needs of a model at a global batch."""

    batch: int
    compute_s: float  # forward + backward of the global batch, one process
    layer_s: list[float]  # its share per top-level layer (nn.Sequential models; else one entry)
    layer_params: list[int]
    act_bytes: list[int]  # per sample, each layer's output
    tp_pairs: list[tuple[int, int]]  # (in, out) features per sample of each tensor-parallel pair
    tp_params: int  # parameters inside the tensor-parallel pairs

    @property
    def params(self) -> int:
        return sum(self.layer_params)


def profile(model, sample, batch: int, repeats: int = 5) -> Profile:
    """Measures ``model`` (one process, this thread count) on ``batch`` copies of ``sample``."""
    import torch
    from torch import nn

    from pyscalecomm.train.strategies import tp_plan

    x = sample.unsqueeze(0).expand(batch, *sample.shape).contiguous()
    y = torch.zeros(batch, dtype=torch.long)
    children = list(model) if isinstance(model, nn.Sequential) else [model]
    fwd = [0.0] * len(children)
    acts = [0] * len(children)
    starts = {}

    def pre(i):
        return lambda m, a: starts.__setitem__(i, time.perf_counter())

    def post(i):
        def hook(m, a, out):
            fwd[i] += time.perf_counter() - starts[i]
            acts[i] = out[0].numel() * out.element_size() if hasattr(out, "numel") else 0

        return hook

    handles = [c.register_forward_pre_hook(pre(i)) for i, c in enumerate(children)]
    handles += [c.register_forward_hook(post(i)) for i, c in enumerate(children)]

    def run(k):
        nn.functional.cross_entropy(model(x), y).backward()
        model.zero_grad(set_to_none=True)

    def forget_warmup():  # the layer times count the timed steps only
        fwd[:] = [0.0] * len(fwd)

    compute = median_step_s(run, repeats, on_warm=forget_warmup)
    for h in handles:
        h.remove()
    total_fwd = sum(fwd) or 1.0
    plan = tp_plan(model) or {}
    pairs, tp_params = [], 0
    names = dict(model.named_modules())
    cols = [k for k, v in plan.items() if type(v).__name__ == "ColwiseParallel"]
    rows = [k for k, v in plan.items() if type(v).__name__ == "RowwiseParallel"]
    tokens = sample.shape[0] if sample.dim() == 2 else 1  # a sequence (the transformer's input)
    for c, r in zip(cols, rows, strict=True):
        a, b = names[c], names[r]
        pairs.append((a.in_features * tokens, b.out_features * tokens))
        tp_params += sum(p.numel() for p in a.parameters()) + sum(p.numel() for p in b.parameters())
    return Profile(
        batch=batch,
        compute_s=compute,
        layer_s=[compute * f / total_fwd for f in fwd],
        layer_params=[sum(p.numel() for p in c.parameters()) for c in children],
        act_bytes=acts,
        tp_pairs=pairs,
        tp_params=tp_params,
    )


def overheads(cfg, timeout: float = 120) -> dict[str, float]:
    """Seconds per step each strategy's PyTorch machinery adds to the plain
    model's forward and backward (DDP's hooks, FSDP's per-layer hooks and
    copies, DTensor's dispatch, the pipeline's microbatching), measured on a
    1-rank group in a child process at ``cfg``'s per-rank batch: what no
    alpha-beta term prices, and at small sizes what decides."""
    import json
    import subprocess
    import sys

    # The child is a job of its own: nothing of this job's launcher (torchrun's
    # agent store, MPI's or Slurm's rank variables) may reach it.
    launcher = ("OMPI_", "PMI", "PMIX_", "SLURM_", "TORCHELASTIC_", "MPI_", "HYDRA_", "MASTER_")
    ours = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launcher) and k not in ours}
    cmd = [sys.executable, "-m", "pyscalecomm.train.predict", json.dumps(dataclasses.asdict(cfg))]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"measuring the strategies' overheads failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _measure_overheads(cfg) -> dict[str, float]:
    """The child's side of :func:`overheads` (a 1-rank gloo job)."""
    import torch
    import torch.distributed as dist
    from torch import nn

    from pyscalecomm.train import data, models, strategies

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.set_num_threads(cfg.threads)
    d = data.load(cfg.data, cfg.model, cfg.samples)
    x, y = d.train_x[: cfg.batch_size], d.train_y[: cfg.batch_size]

    def timed(step) -> float:
        return median_step_s(lambda k: step(x, y), 9, warmup=3)

    def fresh():
        torch.manual_seed(cfg.seed)
        return models.build(cfg.model, d.input_shape, d.classes, cfg.width)

    plain = fresh()

    def plain_step(x, y):
        nn.functional.cross_entropy(plain(x), y).backward()
        plain.zero_grad(set_to_none=True)

    base = timed(plain_step)
    one = dataclasses.replace(cfg, world=1, backend="gloo", mesh="", compress="none")
    out = {}
    for name in ("allreduce", "fsdp", "tp", "pp"):
        try:
            c = dataclasses.replace(one, strategy=name)
            share = strategies.build(c, fresh(), torch.device("cpu"), lambda ddp, group: None)
        except ValueError:
            continue  # no plan for this model
        out[name] = max(0.0, timed(share.step) - base)
        for g in share.groups:
            dist.destroy_process_group(g)
    dist.destroy_process_group()
    return out


def scaled(prof: Profile, batch: int, compute_s: float | None = None) -> Profile:
    """``prof`` at another global batch (compute in proportion), or with the
    global batch's forward + backward time given (another machine's)."""
    total = compute_s if compute_s is not None else prof.compute_s * batch / prof.batch
    share = [t / prof.compute_s for t in prof.layer_s] if prof.compute_s else prof.layer_s
    return dataclasses.replace(prof, batch=batch, compute_s=total, layer_s=[total * f for f in share])


def _allreduce(n: float, p: int, link: Link) -> float:
    return 0.0 if p <= 1 else 2 * (p - 1) * link.alpha + 2 * (p - 1) / p * n * link.beta


def _gather(n: float, p: int, link: Link) -> float:
    return 0.0 if p <= 1 else (p - 1) * link.alpha + (p - 1) / p * n * link.beta


@dataclass
class Prediction:
    step_s: float
    compute_s: float
    comm_s: float
    state_bytes: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def predict(
    strategy: str,
    world: int,
    mesh: tuple[int, int],
    prof: Profile,
    link: Link,
    *,
    cores: int | None = None,
    threads: int = 1,
    microbatches: int = 4,
    overhead: dict[str, float] | None = None,
) -> Prediction:
    """One strategy's step time and per-rank model state (see the module doc);
    ``overhead``: :func:`overheads`, added to the compute."""
    from pyscalecomm.train.strategies import canonical, pp_split_sizes

    s = canonical(strategy)
    d, m = mesh
    cores = cores or os.cpu_count() or 1
    running = max(1, min(world, cores // max(1, threads)))  # ranks that compute at once
    ov = overhead or {}
    parts = {"dp+tp": ("tp", "fsdp"), "dp+pp": ("pp",)}.get(s, (s,))
    extra = sum(ov.get(p, 0.0) for p in parts)  # the machinery's own time per rank and step
    t = prof.compute_s
    pbytes = 4 * prof.params
    if s in ("allreduce", "fsdp"):
        critical = t / d
        work = world * (critical + extra)
        if s == "allreduce":
            comm, state = _allreduce(pbytes, d, link), 3 * pbytes
        else:
            units = sum(1 for p in prof.layer_params if p)  # each parameterised layer is sharded on its own
            comm = 0.0 if d == 1 else 3 * ((d - 1) * units * link.alpha + (d - 1) / d * pbytes * link.beta)
            state = 3 * pbytes / d
    elif s in ("tp", "dp+tp"):
        b = prof.batch / d
        critical = t / d / m
        work = world * (critical + extra)
        comm = sum(_allreduce(4 * b * i, m, link) + _allreduce(4 * b * o, m, link) for i, o in prof.tp_pairs)
        local = prof.params - prof.tp_params + prof.tp_params / m
        if d > 1:  # fully sharded across the rows
            comm += 3 * _gather(4 * local, d, link)
        state = 3 * 4 * local / d
    elif s in ("pp", "dp+pp"):
        stages = m
        bounds = pp_split_sizes(prof.layer_params, stages)
        stage_s = [sum(prof.layer_s[a:b]) / d for a, b in bounds]
        stage_p = [sum(prof.layer_params[a:b]) for a, b in bounds]
        boundary = max((prof.act_bytes[b - 1] for a, b in bounds[:-1]), default=0)
        per_mb = prof.batch / d / microbatches
        slots = microbatches + stages - 1
        critical = slots * max(stage_s) / microbatches
        work = d * sum(stage_s) + world * extra
        comm = slots * 2 * (link.alpha + boundary * per_mb * link.beta) + _allreduce(
            4 * max(stage_p), d, link
        )
        state = 3 * 4 * max(stage_p)
    else:
        raise ValueError(f"no prediction for strategy {strategy!r}")
    # The slowest rank's path, or all ranks' work over the cores that run them
    # at once, whichever is longer (a pipeline's idle stages leave their cores
    # to the busy one).
    comp = max(critical + extra, work / running)
    return Prediction(comp + comm, comp, comm, int(state))


def main() -> int:
    """``python -m pyscalecomm.train.predict '<config JSON>'``: prints the
    strategies' overheads (JSON) measured on a 1-rank job (see :func:`overheads`)."""
    import json
    import sys

    from pyscalecomm.train.config import RunConfig

    print(json.dumps(_measure_overheads(RunConfig(**json.loads(sys.argv[1])))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
