"""``--strategy adaptive``: a parallelism per block of the model, chosen from
predicted costs and corrected by timing the first steps.

A *unit* is a run of top-level layers of an nn.Sequential model: a
tensor-parallel pair (a column-wise Linear, parameter-free layers, a
row-wise Linear), a transformer encoder layer (its feed-forward pair inside),
or one parameterised layer; parameter-free layers join the unit before
them. Each unit runs in one of four modes:

==== ======================================================================
dp   data parallel: this rank's share of the batch; the unit's gradients
     averaged over the ranks (one allreduce of every dp gradient)
fsdp fully sharded (``fully_shard`` of the unit's layers): this rank's share;
     parameters all-gathered before use, gradients reduce-scattered
tp   tensor parallel (the unit's pair column- then row-wise). A pair of
     top-level layers takes the batch in the layout around it: from shares
     it all-gathers its input and reduce-scatters its output (sequence
     parallelism: backward the reverse), between whole-batch units it
     all-reduces its output forward and its input gradient backward. A pair
     inside a transformer encoder layer sees the whole batch; the rest of
     that layer (attention, norms) is replicated
rep  replicated: the whole batch on every rank, no communication (every rank
     computes the same gradients)
==== ======================================================================

A plan with every unit dp is DistributedDataParallel itself; otherwise the
dp units' gradients are averaged in one allreduce after the backward. A
chosen plan equal to a whole-model strategy trains as that strategy
(pyscalecomm.train.strategies: its own batch layout, no gathers).

Where a unit on shares meets one on the whole batch, the activations are
all-gathered (backward: this rank's slice of the gradient, times the ranks);
back to shares each rank keeps its slice (backward: the slices' gradients
all-gathered, over the ranks). So every plan computes the gradient of the
mean loss over the global batch, as DDP does.

Planning: every plan (a mode per unit) gets a predicted step time from the
model's per-layer profile (forward + backward measured on each rank at its
share, the ranks' mean), the link's alpha and beta (allreduces of two
sizes timed on the run's own group) and the cores: compute per unit (dp,
fsdp: 1/D of it; tp: 1/D of the pair, the rest whole; rep: all of it),
communication (dp: one allreduce of all dp gradients; fsdp: two
all-gathers and a reduce-scatter per unit; tp: per side of the pair, an
all-gather and a reduce-scatter on shares or an allreduce on the whole
batch; an all-gather per change of batch layout) and memory (parameters,
gradients and momentum a rank holds; ``--max-state-mb`` leaves out plans
above it). The best predicted
plans and the whole-model ones (all dp; every pair tp and the rest
replicated, as ``tp``) are then built on copies of the model, warmed up
and timed for ROUNDS steps in interleaved rounds on the run's first
batches; the fastest measured (median) trains. Every rank makes the same
choice (agreed inputs, times agreed by maximum).
"""

from __future__ import annotations

import copy
import gc
import itertools
import math
import os
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

MODES = ("dp", "fsdp", "tp", "rep")
WHOLE = ("tp", "rep")  # the modes that see the whole batch
MEASURED = 3  # best predicted plans timed besides the whole-model ones
ROUNDS = 5  # timed steps of each, in interleaved rounds after a warm-up
MAX_PLANS = 50_000  # past this, the enumeration leaves rep out


@dataclass(frozen=True)
class Unit:
    start: int  # layers [start, end) of the nn.Sequential
    end: int
    layers: str  # "1-4 Linear ReLU Linear ReLU"
    params: int
    tp_keys: tuple[str, ...]  # the tensor-parallel plan's keys inside (none: no tp mode)
    tp_params: int
    tp_pairs: tuple[tuple[int, int], ...]  # (in, out) features per sample of each pair

    @property
    def top_pairs(self) -> bool:
        """The unit's pairs are layers of the Sequential itself (not inside an
        encoder layer): in tp mode they take and give the layout around them."""
        return bool(self.tp_keys) and all("." not in k for k in self.tp_keys)

    def modes(self, rep: bool = True) -> tuple[str, ...]:
        return tuple(m for m in MODES if (m != "tp" or self.tp_keys) and (rep or m != "rep"))


def units(model: nn.Module, tokens: int = 1) -> list[Unit]:
    """The model's units (see the module doc); ``tokens``: the sequence length
    of a transformer's input (its pairs act per token)."""
    from pyscalecomm.train.strategies import tp_plan

    if not isinstance(model, nn.Sequential):
        raise ValueError("strategy=adaptive plans an nn.Sequential model")
    layers = list(model)
    plan = tp_plan(model) or {}
    keys = list(plan)  # column- then row-wise key of each pair, in order
    spans: dict[int, list] = {}  # first layer -> [end, keys]
    for c, r in zip(keys[0::2], keys[1::2], strict=True):
        a, b = int(c.split(".")[0]), int(r.split(".")[0])
        span = spans.setdefault(a, [b + 1, []])
        span[0] = max(span[0], b + 1)
        span[1] += [c, r]
    bounds: list[list] = []  # [start, end, keys]
    i = 0
    while i < len(layers):
        if i in spans:
            end, ks = spans[i]
            bounds.append([i, end, ks])
            i = end
            continue
        if any(True for _ in layers[i].parameters()) or not bounds:
            bounds.append([i, i + 1, []])
        else:  # parameter-free: with the unit before it
            bounds[-1][1] = i + 1
        i += 1
    if len(bounds) > 1 and not any(True for m in layers[bounds[0][0] : bounds[0][1]] for _ in m.parameters()):
        bounds[1][0] = bounds[0][0]  # leading parameter-free layers: with the first unit that has parameters
        bounds.pop(0)
    named = dict(model.named_modules())
    out = []
    for start, end, ks in bounds:
        mods = layers[start:end]
        pairs, tp_params = [], 0
        for c, r in zip(ks[0::2], ks[1::2], strict=True):
            a, b = named[c], named[r]
            pairs.append((a.in_features * tokens, b.out_features * tokens))
            tp_params += sum(p.numel() for p in a.parameters()) + sum(p.numel() for p in b.parameters())
        span = f"{start}" if end == start + 1 else f"{start}-{end - 1}"
        out.append(
            Unit(
                start,
                end,
                f"{span} " + " ".join(type(m).__name__ for m in mods),
                sum(p.numel() for m in mods for p in m.parameters()),
                tuple(ks),
                tp_params,
                tuple(pairs),
            )
        )
    return out


@dataclass(frozen=True)
class Cost:
    step_s: float
    compute_s: float
    comm_s: float
    state_bytes: int


def cost(plan: tuple[str, ...], us: list[Unit], prof, link, world: int, running: int, in_bytes: int) -> Cost:
    """Predicted step of ``plan`` (see the module doc). ``prof``: a
    predict.Profile at the global batch; ``running``: ranks the cores run at
    once; ``in_bytes``: the model's input per sample."""
    from pyscalecomm.train.predict import _allreduce, _gather

    b, d = prof.batch, world
    comp = comm = 0.0
    dp_bytes = state = 0.0
    layout = "share"
    outs = _pair_layouts(plan, us)
    for i, (u, mode) in enumerate(zip(us, plan, strict=True)):
        t = sum(prof.layer_s[u.start : u.end])
        p = 4.0 * u.params
        want = layout if i in outs else "whole" if mode in WHOLE else "share"
        if want != layout:  # gathered forward (to the whole batch), or the slices' gradients backward
            act = in_bytes if u.start == 0 else prof.act_bytes[u.start - 1]
            comm += _gather(b * act, d, link)
            layout = want
        if mode == "dp":
            comp += t / d
            dp_bytes += p
            state += 3 * p
        elif mode == "fsdp":
            comp += t / d
            comm += 3 * _gather(p, d, link)
            state += 3 * p / d
        elif mode == "tp":
            f = u.tp_params / u.params if u.params else 0.0
            comp += t * (1 - f) + t * f / d
            for k, (n_in, n_out) in enumerate(u.tp_pairs):
                first, last = k == 0, k == len(u.tp_pairs) - 1
                out_side = outs.get(i, "whole") if last else "whole"
                sides = ((n_in, layout if first else "whole"), (n_out, out_side))
                for n, side in sides:  # shares: a gather and a reduce-scatter; whole: one allreduce
                    size = 4.0 * b * n
                    comm += 2 * _gather(size, d, link) if side == "share" else _allreduce(size, d, link)
            if i in outs:
                layout = outs[i]
            state += 3 * (p - 4.0 * u.tp_params + 4.0 * u.tp_params / d)
        else:
            comp += t
            state += 3 * p
    if layout == "whole":  # the loss is on shares
        comm += _gather(b * prof.act_bytes[us[-1].end - 1], d, link)
    if dp_bytes:
        comm += _allreduce(dp_bytes, d, link)
    comp *= max(1.0, d / max(1, running))  # every rank computes this much; the cores run `running` at once
    return Cost(comp + comm, comp, comm, int(state))


def _pair_layouts(plan: tuple[str, ...], us: list[Unit]) -> dict[int, str]:
    """Unit index -> the layout its tp pair hands on, for the tp units whose
    pairs are top-level layers (they take the layout before them as it is):
    shares where the next unit computes on shares or the loss follows, else
    the whole batch."""
    out = {}
    for i, (u, mode) in enumerate(zip(us, plan, strict=True)):
        if mode == "tp" and u.top_pairs:
            nxt = plan[i + 1] if i + 1 < len(plan) else None
            out[i] = "share" if nxt is None or nxt not in WHOLE else "whole"
    return out


def whole_model(us: list[Unit]) -> dict[tuple[str, ...], str]:
    """The whole-model strategies among the plans: all dp (``allreduce``), and
    where the model has pairs every pair tp and the rest replicated (``tp``)."""
    out = {tuple("dp" for _ in us): "allreduce"}
    if any(u.tp_keys for u in us):
        out[tuple("tp" if u.tp_keys else "rep" for u in us)] = "tp"
    return out


def rank_plans(
    us, prof, link, world: int, running: int, in_bytes: int, max_state: float = 0
) -> list[tuple[tuple[str, ...], Cost]]:
    """Every plan with its predicted cost, fastest first (``max_state`` > 0:
    plans holding more bytes of model state per rank left out)."""
    rep = math.prod(len(u.modes()) for u in us) <= MAX_PLANS
    out = []
    for plan in itertools.product(*(u.modes(rep) for u in us)):
        c = cost(plan, us, prof, link, world, running, in_bytes)
        if max_state <= 0 or c.state_bytes <= max_state:
            out.append((plan, c))
    out.sort(key=lambda pc: (pc[1].step_s, pc[0]))
    return out


# ---- runtime ----


def _all_gather(x, group, world: int):
    """Every rank's `x` stacked along the batch dimension, in rank order."""
    x = x.contiguous()
    out = x.new_empty((world * x.shape[0], *x.shape[1:]))
    dist.all_gather_into_tensor(out, x, group=group)
    return out


def _reduce_scatter(x, group, world: int):
    """`x` summed over the ranks, this rank keeping its slice of the batch dimension."""
    x = x.contiguous()
    out = x.new_empty((x.shape[0] // world, *x.shape[1:]))
    dist.reduce_scatter_tensor(out, x, group=group)
    return out


class _Gather(torch.autograd.Function):
    """Shares -> the whole batch (rank order); backward: this rank's slice x world."""

    @staticmethod
    def forward(ctx, x, group, world, rank):
        ctx.world, ctx.rank = world, rank
        return _all_gather(x, group, world)

    @staticmethod
    def backward(ctx, g):
        n = g.shape[0] // ctx.world
        return g[ctx.rank * n : (ctx.rank + 1) * n] * ctx.world, None, None, None


class _Split(torch.autograd.Function):
    """The whole batch -> this rank's share; backward: the shares' gradients gathered, / world."""

    @staticmethod
    def forward(ctx, x, group, world, rank):
        ctx.group, ctx.world = group, world
        n = x.shape[0] // world
        return x[rank * n : (rank + 1) * n].clone()

    @staticmethod
    def backward(ctx, g):
        return _all_gather(g, ctx.group, ctx.world) / ctx.world, None, None, None


class _GatherShares(torch.autograd.Function):
    """Shares -> the whole batch, into a column-wise shard; backward: the
    shards' partial input gradients reduce-scattered to this rank's slice,
    times the ranks (the share's own loss, as _Gather)."""

    @staticmethod
    def forward(ctx, x, group, world):
        ctx.group, ctx.world = group, world
        return _all_gather(x, group, world)

    @staticmethod
    def backward(ctx, g):
        return _reduce_scatter(g, ctx.group, ctx.world) * ctx.world, None, None


class _SumBackward(torch.autograd.Function):
    """The whole batch into a column-wise shard: nothing forward; backward the
    shards' partial input gradients summed (allreduce)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        dist.all_reduce(g, group=ctx.group)
        return g, None


class _ScatterSum(torch.autograd.Function):
    """A row-wise shard's partial output summed over the ranks, this rank
    keeping its slice of the batch; backward: the slices' gradients
    all-gathered, over the ranks (as _Split)."""

    @staticmethod
    def forward(ctx, z, group, world):
        ctx.group, ctx.world = group, world
        return _reduce_scatter(z, group, world)

    @staticmethod
    def backward(ctx, g):
        return _all_gather(g, ctx.group, ctx.world) / ctx.world, None, None


class _Sum(torch.autograd.Function):
    """A row-wise shard's partial output summed over the ranks (allreduce);
    backward nothing (every rank holds the same whole-batch gradient)."""

    @staticmethod
    def forward(ctx, z, group):
        z = z.contiguous().clone()
        dist.all_reduce(z, group=group)
        return z

    @staticmethod
    def backward(ctx, g):
        return g, None


def _shard_range(n: int, world: int, rank: int) -> tuple[int, int]:
    """[start, length) of rank's part of n rows (parts differ by one at most)."""
    base, extra = divmod(n, world)
    return rank * base + min(rank, extra), base + (rank < extra)


class ColumnShard(nn.Module):
    """This rank's output features of a Linear (``weight`` rows, ``bias``),
    its input the whole batch: all-gathered from shares (``from_shares``) or
    taken whole. Each parameter's ``tp_slice`` is (dim, start, length) of the
    full one. Evaluation (no gradient recorded): the input is whole."""

    def __init__(self, linear: nn.Linear, group, from_shares: bool):
        super().__init__()
        self.group, self.from_shares = group, from_shares
        self.world, rank = dist.get_world_size(group), dist.get_rank(group)
        start, n = _shard_range(linear.out_features, self.world, rank)
        self.weight = nn.Parameter(linear.weight.detach()[start : start + n].clone())
        self.weight.tp_slice = (0, start, n)
        self.bias = None
        if linear.bias is not None:
            self.bias = nn.Parameter(linear.bias.detach()[start : start + n].clone())
            self.bias.tp_slice = (0, start, n)

    def forward(self, x):
        if torch.is_grad_enabled() and self.from_shares:
            x = _GatherShares.apply(x, self.group, self.world)
        elif torch.is_grad_enabled():
            x = _SumBackward.apply(x, self.group)
        return nn.functional.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[1]} -> {self.weight.shape[0]} of the outputs, " + (
            "from shares" if self.from_shares else "whole"
        )


class RowShard(nn.Module):
    """This rank's input features of a Linear (``weight`` columns; the bias
    whole), its partial output summed over the ranks: reduce-scattered to
    this rank's share (``to_shares``; the bias then trains as a dp
    parameter) or all-reduced whole. Evaluation: summed whole."""

    def __init__(self, linear: nn.Linear, group, to_shares: bool):
        super().__init__()
        self.group, self.to_shares = group, to_shares
        self.world, rank = dist.get_world_size(group), dist.get_rank(group)
        start, n = _shard_range(linear.in_features, self.world, rank)
        self.weight = nn.Parameter(linear.weight.detach()[:, start : start + n].clone())
        self.weight.tp_slice = (1, start, n)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())

    def forward(self, y):
        z = nn.functional.linear(y, self.weight)
        if torch.is_grad_enabled() and self.to_shares:
            z = _ScatterSum.apply(z, self.group, self.world)
        else:
            z = _Sum.apply(z, self.group)
        return z if self.bias is None else z + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.shape[1]} of the inputs -> {self.weight.shape[0]}, " + (
            "to shares" if self.to_shares else "whole"
        )


def _shard_pairs(model: nn.Sequential, u: Unit, group, from_shares: bool, to_shares: bool) -> list:
    """Replaces the unit's top-level pairs by shards (in place); the
    parameters that train as dp (a row-wise bias summed to shares)."""
    dp = []
    keys = u.tp_keys
    for k, (c, r) in enumerate(zip(keys[0::2], keys[1::2], strict=True)):
        first, last = k == 0, k == len(keys) // 2 - 1
        col = ColumnShard(model[int(c)], group, from_shares and first)
        row = RowShard(model[int(r)], group, to_shares and last)
        model[int(c)], model[int(r)] = col, row
        if row.to_shares and row.bias is not None:
            dp.append(row.bias)
    return dp


class Layout(nn.Module):
    """A change of batch layout while training; nothing while evaluating
    (no gradient recorded: every rank holds the whole test set)."""

    def __init__(self, fn, group):
        super().__init__()
        self.fn, self.group = fn, group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)

    def forward(self, x):
        if not torch.is_grad_enabled():
            return x
        return self.fn.apply(x, self.group, self.world, self.rank)

    def extra_repr(self) -> str:
        return "gather" if self.fn is _Gather else "split"


def build_plan(plan: tuple[str, ...], us: list[Unit], model: nn.Sequential, mesh) -> tuple[nn.Module, list]:
    """``model`` (changed in place) run as ``plan``: the network to train and
    the parameters whose gradients the step averages (the dp units'; none
    when every unit is dp: then the network is DDP's)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    from pyscalecomm.train.strategies import tp_plan

    group = mesh.get_group()
    if all(
        m == "dp" for m in plan
    ):  # data parallel throughout: DDP itself (buckets overlapped with the backward)
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, process_group=group), []
    full = tp_plan(model) or {}
    outs = _pair_layouts(plan, us)
    inner = [u for i, (u, m) in enumerate(zip(us, plan, strict=True)) if m == "tp" and i not in outs]
    keys = [k for u in inner for k in u.tp_keys]
    if keys:  # pairs inside encoder layers: DTensor's column- and row-wise Linear
        parallelize_module(model, mesh, {k: full[k] for k in keys})
    dp = [
        p
        for u, m in zip(us, plan, strict=True)
        if m == "dp"
        for layer in model[u.start : u.end]
        for p in layer.parameters()
    ]
    seq: list[nn.Module] = []
    layout = "share"
    for i, (u, mode) in enumerate(zip(us, plan, strict=True)):
        if mode == "fsdp":
            for layer in model[u.start : u.end]:
                if any(True for _ in layer.parameters()):
                    fully_shard(layer, mesh=mesh)
        want = layout if i in outs else "whole" if mode in WHOLE else "share"
        if want != layout:
            seq.append(Layout(_Gather if want == "whole" else _Split, group))
            layout = want
        if i in outs:
            dp += _shard_pairs(model, u, group, layout == "share", outs[i] == "share")
            layout = outs[i]
        seq.extend(model[u.start : u.end])
    if layout == "whole":
        seq.append(Layout(_Split, group))
    return nn.Sequential(*seq), dp


def make_step(net: nn.Module, dp_params: list, group, world: int):
    from pyscalecomm.train.strategies import average_gradients

    def step(x, y):
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        if dp_params and world > 1:  # one allreduce of every dp gradient, averaged
            average_gradients(dp_params, group, world)
        return loss.item()

    return step


def measure_link(group, world: int, nbytes: int):
    """The group's alpha and beta from allreduces of 8 bytes and ``nbytes``
    (the best of four each), the ranks' maximum."""
    from pyscalecomm.train.predict import Link

    def best(n: int) -> float:
        t = torch.zeros(max(1, n // 4))
        dist.all_reduce(t, group=group)  # warm-up
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            dist.all_reduce(t, group=group)
            times.append(time.perf_counter() - t0)
        return min(times)

    small, big = best(8), best(nbytes)
    alpha = small / (2 * (world - 1))
    beta = max(big - small, 0.0) / (2 * (world - 1) / world * nbytes)
    v = torch.tensor([alpha, beta], dtype=torch.float64)
    dist.all_reduce(v, op=dist.ReduceOp.MAX, group=group)
    return Link(float(v[0]), float(v[1]), "measured on the run's group")


def _agreed_max(values: list[float], group) -> list[float]:
    v = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(v, op=dist.ReduceOp.MAX, group=group)
    return v.tolist()


def choose(cfg, model: nn.Sequential, mesh, batches: list, threads: int = 1):
    """The plan to train (see the module doc) and what chose it, for the report."""
    from pyscalecomm.train import predict

    started = time.perf_counter()
    group = mesh.get_group()
    world = dist.get_world_size(group)
    x0, y0 = batches[0]
    tokens = x0.shape[1] if x0.dim() == 3 else 1  # a sequence of feature vectors (the transformer's input)
    us = units(model, tokens)
    prof = predict.profile(copy.deepcopy(model), x0[0], x0.shape[0], repeats=3)
    mean = torch.tensor([prof.compute_s, *prof.layer_s], dtype=torch.float64)
    dist.all_reduce(mean, group=group)  # the ranks' mean: one rank descheduled mid-profile is noise, not cost
    mean /= world
    prof.compute_s, prof.layer_s = float(mean[0]), mean[1:].tolist()
    prof = predict.scaled(prof, x0.shape[0] * world)
    link = measure_link(group, world, min(4 << 20, max(64 << 10, 4 * prof.params)))
    running = max(1, min(world, (os.cpu_count() or 1) // max(1, threads)))
    in_bytes = x0[0].numel() * x0.element_size()
    ranked = rank_plans(us, prof, link, world, running, in_bytes, cfg.max_state_mb * 2**20)
    if not ranked:
        raise ValueError(f"strategy=adaptive: no plan holds under --max-state-mb {cfg.max_state_mb}")
    predicted = dict(ranked)
    wholes = whole_model(us)
    candidates = [p for p, _ in ranked[:MEASURED]]
    candidates += [p for p in wholes if p in predicted and p not in candidates]

    # Every candidate built on its own copy, warmed up once, then timed one
    # step each in ROUNDS interleaved rounds (the machine's drift hits all alike).
    steps = []
    for plan in candidates:
        net, dp = build_plan(plan, us, copy.deepcopy(model), mesh)
        steps.append((net, make_step(net, dp, group, world)))
    times: list[list[float]] = [[] for _ in candidates]
    for r in range(1 + ROUNDS):
        x, y = batches[r % len(batches)]
        for i, (net, step) in enumerate(steps):
            net.zero_grad(set_to_none=True)
            dist.barrier(group=group)
            t0 = time.perf_counter()
            step(x, y)
            if r:
                times[i].append(time.perf_counter() - t0)
    measured = [statistics.median(t) for t in times]
    del steps, net, step  # the copies, their hooks and buffers
    gc.collect()
    measured = _agreed_max(measured, group)
    chosen = candidates[min(range(len(candidates)), key=lambda i: (measured[i], i))]
    info = {
        "units": [
            {"layers": u.layers, "params": u.params, "mode": m} for u, m in zip(us, chosen, strict=True)
        ],
        "chosen": ",".join(chosen),
        "candidates": [
            {
                "plan": ",".join(p),
                "whole_model": wholes.get(p),
                "predicted_ms": 1e3 * predicted[p].step_s,
                "measured_ms": 1e3 * t,
                "state_mib": predicted[p].state_bytes / 2**20,
            }
            for p, t in zip(candidates, measured, strict=True)
        ],
        "link": {"alpha_us": 1e6 * link.alpha, "bus_gbps": 1e-9 / link.beta if link.beta > 0 else None},
        "plans": len(ranked),
        "plan_s": time.perf_counter() - started,
    }
    return chosen, us, info


def describe(info: dict) -> str:
    """The report's lines for one adaptive run: the plan per unit, and each
    timed candidate against the whole-model strategies."""
    lines = ["  plan per unit: " + "; ".join(f"{u['layers']}: {u['mode']}" for u in info["units"])]
    for c in info["candidates"]:
        tag = f" (= strategy {c['whole_model']})" if c["whole_model"] else ""
        mark = "  <- chosen" if c["plan"] == info["chosen"] else ""
        lines.append(
            f"  {c['plan']:<24}{tag:<24} predicted {c['predicted_ms']:8.1f} ms  "
            f"measured {c['measured_ms']:8.1f} ms/step{mark}"
        )
    wholes = [c for c in info["candidates"] if c["whole_model"]]
    best_whole = min(wholes, key=lambda c: c["measured_ms"], default=None)
    chosen = next(c for c in info["candidates"] if c["plan"] == info["chosen"])
    if best_whole is not None and chosen["measured_ms"] > 0:
        lines.append(
            f"  {best_whole['measured_ms'] / chosen['measured_ms']:.2f}x the best whole-model strategy "
            f"({best_whole['whole_model']}) in the timed steps; planning took {info['plan_s']:.1f} s "
            f"({info['plans']} plans predicted)"
        )
    return "\n".join(lines)
