"""The driver's parallelism strategies, one declaration each.

A strategy turns one rank's copy of the model (built alike on every rank,
same seed) into that rank's share of the training, with PyTorch's own APIs
over groups of the configuration's backend:

======== ==================================================================
allreduce DistributedDataParallel over all ranks (``ddp`` is the same)
fsdp      ``fully_shard`` (FSDP2) over all ranks: parameters, gradients and
          optimizer state sharded; all-gather before use, reduce-scatter after
tp        ``parallelize_module`` over all ranks: the model's tensor-parallel
          plan (column- then row-wise pairs); every rank sees the whole batch
pp        ``torch.distributed.pipelining``: the model's layers in one stage per
          rank, balanced by parameters; ``--pp-schedule`` gpipe or 1f1b,
          ``--microbatches`` per step
dp+tp     a 2-D mesh (``--mesh DxT``): tensor parallel within each row,
          fully sharded data parallel across rows (PyTorch's 2-D recipe)
dp+pp     a 2-D mesh (``--mesh DxS``): a pipeline within each row, its
          gradients averaged across rows
adaptive  a mode per block of the model (data parallel, fully sharded,
          tensor parallel or replicated), planned from predicted costs and
          corrected by timing the best plans' first steps
          (pyscalecomm.train.adaptive)
ps-*      the parameter server (pyscalecomm.ps): sync, async, ssp:K
======== ==================================================================

Every strategy trains the same global batch per step (``batch_size`` x
world samples, in the same order): a data-parallel degree D splits it into D
shares; ranks that share a data-parallel index see the same share. Where the
math is the same (allreduce, fsdp, tp, pp, hybrids; ps-sync), so is the loss
curve, up to the order of floating-point sums.

``build(cfg, model, ...)`` returns a :class:`Share`: what the training loop
calls. ``Share.mesh`` is (data-parallel degree, model-parallel degree).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

DATA_PARALLEL = ("allreduce", "ddp", "fsdp")
MODEL_PARALLEL = ("tp", "pp")
HYBRID = ("dp+tp", "dp+pp")
NAMES = (*DATA_PARALLEL, *MODEL_PARALLEL, *HYBRID, "adaptive", "ps-sync", "ps-async", "ps-ssp:K")
PP_SCHEDULES = ("gpipe", "1f1b")


def canonical(strategy: str) -> str:
    return "allreduce" if strategy == "ddp" else strategy


def mesh_shape(strategy: str, world: int, mesh: str) -> tuple[int, int]:
    """(data-parallel degree, model-parallel degree) of a strategy on ``world`` ranks.

    ``mesh`` ("DxM", or "" for the default) is only for the hybrids: their
    default is (world / 2) x 2. Raises ValueError naming what to change."""
    s = canonical(strategy)
    if s in HYBRID:
        if mesh:
            try:
                d, m = (int(v) for v in mesh.lower().split("x"))
            except ValueError:
                raise ValueError(
                    f"mesh={mesh!r}: write DxM, e.g. 2x2 (data-parallel x model-parallel)"
                ) from None
        else:
            if world < 4 or world % 2:
                raise ValueError(f"strategy={strategy} on {world} ranks: give --mesh DxM (D x M = {world})")
            d, m = world // 2, 2
        if d < 1 or m < 1 or d * m != world:
            raise ValueError(f"mesh={mesh or f'{d}x{m}'}: D x M must be the world ({world})")
        return d, m
    if mesh:
        raise ValueError(f"mesh={mesh!r} is for the hybrid strategies ({', '.join(HYBRID)}), not {strategy}")
    if s in MODEL_PARALLEL:
        return 1, world
    return world, 1


def tp_plan(model: nn.Module) -> dict | None:
    """The model's tensor-parallel plan for ``parallelize_module``, or None:
    in an nn.Sequential, each pair of Linear layers with only parameter-free
    layers between them as column- then row-wise (one all-reduce forward,
    one backward; the last Linear, the classifier, stays whole); in each
    transformer encoder layer, its feed-forward pair likewise. The rest is
    replicated."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    if isinstance(model, nn.Sequential):
        layers = list(model)
        linears = [i for i, m in enumerate(layers) if isinstance(m, nn.Linear)]
        taken: set[int] = set()
        for a, b in zip(linears, linears[1:-1], strict=False):
            free = all(not any(True for _ in m.parameters()) for m in layers[a + 1 : b])
            if free and a not in taken:
                plan[str(a)], plan[str(b)] = ColwiseParallel(), RowwiseParallel()
                taken |= {a, b}
    for name, m in model.named_modules():
        if isinstance(m, nn.TransformerEncoderLayer):
            plan[f"{name}.linear1"], plan[f"{name}.linear2"] = ColwiseParallel(), RowwiseParallel()
    return plan or None


@functools.cache
def has_tp_plan(model: str) -> bool:
    """Whether :func:`tp_plan` finds a plan in the named model (built small: the
    plan follows the model's structure, not its size)."""
    from pyscalecomm.train import data, models

    return tp_plan(models.build(model, data.synthetic(model, 1).input_shape, 10, 8)) is not None


def pp_split(model: nn.Module, stages: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) layer ranges of an nn.Sequential, one per stage,
    balanced by parameter count (each stage at least one layer)."""
    if not isinstance(model, nn.Sequential):
        raise ValueError("pipeline strategies split an nn.Sequential model")
    return pp_split_sizes([sum(p.numel() for p in m.parameters()) for m in model], stages)


def pp_split_sizes(layer_params: list[int], stages: int) -> list[tuple[int, int]]:
    """:func:`pp_split` over the layers' parameter counts: the contiguous
    split whose largest stage is smallest (ties: the earliest cuts)."""
    n = len(layer_params)
    if n < stages:
        raise ValueError(f"the model has {n} layers: too few for {stages} pipeline stages")
    prefix = [0]
    for p in layer_params:
        prefix.append(prefix[-1] + p + 1)  # + 1: a layer without parameters still costs a little
    # best[k][i]: (largest stage, cuts) splitting layers [0, i) into k stages
    best = {(1, i): (prefix[i], []) for i in range(1, n + 1)}
    for k in range(2, stages + 1):
        for i in range(k, n + 1):
            best[(k, i)] = min(
                (max(best[(k - 1, j)][0], prefix[i] - prefix[j]), [*best[(k - 1, j)][1], j])
                for j in range(k - 1, i)
            )
    bounds = [0, *best[(stages, n)][1], n]
    return [(bounds[k], bounds[k + 1]) for k in range(stages)]


@dataclass
class Share:
    """One rank's share of a strategy, as the training loop uses it."""

    step: Callable  # (x, y) -> loss (float) or None: forward and backward of this rank's share
    params: list  # what this rank's optimizer updates (empty: the servers update)
    dp: int  # data-parallel degree: the global batch is split into dp shares
    dp_rank: int  # this rank's share
    mesh: tuple[int, int]  # (data-parallel, model-parallel) degree
    evaluate_model: Callable  # () -> a module that maps the test inputs to logits (every rank calls it)
    bubble: float | None = None  # pipeline: the schedule's idle share (S - 1) / (M + S - 1)
    after_epoch: Callable = lambda: None
    close: Callable = lambda: {}  # -> extra results (a parameter server's stats)
    # Workers that never wait for each other (ps-async) draw an epoch's
    # batches from a pool shared by the ranks, so a faster worker takes more
    # of them; the others take a fixed share each step.
    pooled: bool = False
    groups: list = dataclasses.field(default_factory=list)  # destroyed when the run ends


def _options(cfg) -> tuple:
    """(backend, its options or None) of the run's groups: scalecomm's carry the algorithm."""
    if cfg.backend != "scalecomm":
        return cfg.backend, None
    import pyscalecomm

    return cfg.backend, pyscalecomm.Options(algorithm=cfg.algo)


_MESH_NUMBERS = itertools.count()  # gives each run's mesh dimensions names of their own (see _mesh)


def _mesh(cfg, shape: tuple[int, ...], names: tuple[str, ...]) -> tuple:
    """A device mesh on groups of this run's own, and its dimensions by name.

    PyTorch compares device meshes by layout and dimension names, not by their
    groups, and DTensor caches sharding and redistribution plans under that
    comparison. A run destroys its groups when it ends, so a later mesh equal
    to this one would be handed plans that reach the destroyed groups. Each
    run's dimension names carry a number of their own ("tp#3"), so no mesh is
    equal to an earlier run's. The number counts meshes in this process; every
    rank runs the same configurations in the same order.
    """
    from torch.distributed.device_mesh import init_device_mesh

    number = next(_MESH_NUMBERS)
    own = tuple(f"{n}#{number}" for n in names)
    mesh = init_device_mesh(
        "cpu" if cfg.device == "cpu" else "cuda",
        shape,
        mesh_dim_names=own,
        backend_override={n: _options(cfg) for n in own},
    )
    dims = {n: mesh if len(names) == 1 else mesh[o] for n, o in zip(names, own, strict=True)}
    return mesh, dims


def _groups(mesh) -> list:
    """The mesh's own groups (destroyed with the run; never the default group)."""
    return [g for g in mesh.get_all_groups() if g is not dist.group.WORLD]


def _ce(model):
    def step(x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss.item()

    return step


def _ddp(cfg, model, device, hook):
    from torch.nn.parallel import DistributedDataParallel as DDP

    backend, options = _options(cfg)
    group = dist.new_group(backend=backend, pg_options=options)
    net = DDP(
        model,
        process_group=group,
        bucket_cap_mb=cfg.bucket_mb or None,  # None: DDP's default, incl. its small first bucket
        device_ids=[device.index] if device.type == "cuda" else None,
    )
    hook(net, group)
    world = dist.get_world_size()
    return Share(
        _ce(net), list(net.parameters()), world, dist.get_rank(), (world, 1), lambda: model, groups=[group]
    )


def _fsdp(cfg, model, device, hook):
    world = dist.get_world_size()
    mesh, _ = _mesh(cfg, (world,), ("dp",))
    _shard(model, mesh)
    rank = dist.get_rank()
    return Share(
        _ce(model), list(model.parameters()), world, rank, (world, 1), lambda: model, groups=_groups(mesh)
    )


def _shard(model, mesh) -> None:
    """fully_shard each parameterised child (its own all-gather), then the root."""
    from torch.distributed.fsdp import fully_shard

    for m in model.children():
        if any(True for _ in m.parameters()):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _tp(cfg, model, device, hook, dp: int = 1):
    from torch.distributed.tensor.parallel import parallelize_module

    plan = tp_plan(model)
    if plan is None:  # RunConfig.check refuses this first; the predictor's probe relies on the error
        raise ValueError(f"strategy={cfg.strategy}: the {cfg.model} model has no tensor-parallel plan")
    world = dist.get_world_size()
    if dp == 1:
        mesh, _ = _mesh(cfg, (world,), ("tp",))
        parallelize_module(model, mesh, plan)
        return Share(
            _ce(model), list(model.parameters()), 1, 0, (1, world), lambda: model, groups=_groups(mesh)
        )
    mesh, dims = _mesh(cfg, (dp, world // dp), ("dp", "tp"))
    parallelize_module(model, dims["tp"], plan)
    _shard(model, dims["dp"])
    d = dims["dp"].get_local_rank()
    shape = (dp, world // dp)
    return Share(_ce(model), list(model.parameters()), dp, d, shape, lambda: model, groups=_groups(mesh))


def average_gradients(params: list, group, size: int) -> None:
    """The parameters' gradients averaged over ``group`` (``size`` ranks) in one allreduce."""
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, group=group)
    flat /= size
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
        offset += p.numel()


def _pp(cfg, model, device, hook, dp: int = 1):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    world = dist.get_world_size()
    stages = world // dp
    if dp == 1:
        mesh, _ = _mesh(cfg, (world,), ("pp",))
        pp_group, dp_group, s = mesh.get_group(), None, mesh.get_local_rank()
        d = 0
    else:
        mesh, dims = _mesh(cfg, (dp, stages), ("dp", "pp"))
        pp_group, dp_group = dims["pp"].get_group(), dims["dp"].get_group()
        s, d = dims["pp"].get_local_rank(), dims["dp"].get_local_rank()
    bounds = pp_split(model, stages)
    lo, hi = bounds[s]
    part = model[lo:hi]
    stage = PipelineStage(part, s, stages, device, group=pp_group)
    kind = ScheduleGPipe if cfg.pp_schedule == "gpipe" else Schedule1F1B
    schedule = kind(stage, cfg.microbatches, loss_fn=nn.functional.cross_entropy)
    params = list(part.parameters())
    last = s == stages - 1

    def step(x, y):
        losses = []
        if s == 0:
            schedule.step(x, target=y if last else None, losses=losses if last else None)
        elif last:
            schedule.step(target=y, losses=losses)
        else:
            schedule.step()
        if dp_group is not None and params:  # average each stage's gradients over its replicas
            average_gradients(params, dp_group, dp)
        return sum(float(v.detach()) for v in losses) / len(losses) if losses else None

    def whole():
        """Every stage's parameters (from the first replica) in this rank's full model."""
        mine = (
            {k: v for k, v in model.state_dict().items() if lo <= int(k.split(".")[0]) < hi} if d == 0 else {}
        )
        every = [None] * world
        dist.all_gather_object(every, mine)
        merged = {k: v for part_sd in every for k, v in part_sd.items()}
        model.load_state_dict(merged)
        return model

    m = cfg.microbatches
    bubble = (stages - 1) / (m + stages - 1)
    return Share(step, params, dp, d, (dp, stages), whole, bubble=bubble, groups=_groups(mesh))


def _adaptive(cfg, model, device, hook, batches):
    from pyscalecomm.train import adaptive

    if not batches:
        raise ValueError("strategy=adaptive times its candidate plans on real batches: pass batches")
    world = dist.get_world_size()
    mesh, _ = _mesh(cfg, (world,), ("adaptive",))
    plan, units, info = adaptive.choose(cfg, model, mesh, batches, cfg.threads)
    whole = adaptive.whole_model(units).get(plan)
    if whole is not None:  # a whole-model plan trains as that strategy itself (its own batch layout)
        for g in _groups(mesh):  # the planning's groups end here: nothing of theirs runs beside training
            dist.destroy_process_group(g)
        share = BUILDERS[whole](cfg, model, device, hook)
        share.close = lambda: {"adaptive": info}
        return share
    net, dp = adaptive.build_plan(plan, units, model, mesh)
    step = adaptive.make_step(net, dp, mesh.get_group(), world)
    return Share(
        step,
        list(net.parameters()),
        world,
        dist.get_rank(),
        (world, 1),
        lambda: net,
        close=lambda: {"adaptive": info},
        groups=_groups(mesh),
    )


def _ps(cfg, model, device, hook):
    from pyscalecomm.ps import ParameterServer

    net = ParameterServer(
        model,
        servers=cfg.ps_servers,
        mode=cfg.strategy[3:],
        optimizer="sgd",
        lr=cfg.lr,
        momentum=0.9,
        backend=cfg.backend,
        compression=cfg.compress,
    )

    def close():
        net.close()
        return {"ps": net.stats()}

    world = dist.get_world_size()
    return Share(
        _ce(net),
        [],
        world,
        dist.get_rank(),
        (world, 1),
        lambda: model,
        after_epoch=net.refresh,
        close=close,
        pooled=net.mode == "async",
    )


BUILDERS: dict[str, Callable] = {
    "allreduce": _ddp,
    "fsdp": _fsdp,
    "tp": _tp,
    "pp": _pp,
    "dp+tp": lambda cfg, model, device, hook: _tp(cfg, model, device, hook, dp=cfg_dp(cfg)),
    "dp+pp": lambda cfg, model, device, hook: _pp(cfg, model, device, hook, dp=cfg_dp(cfg)),
}


def cfg_dp(cfg) -> int:
    return mesh_shape(cfg.strategy, cfg.world, cfg.mesh)[0]


def build(cfg, model: nn.Module, device, hook: Callable, batches: list | None = None) -> Share:
    """This rank's share of ``cfg.strategy`` over ``model`` (``hook(ddp, group)``
    registers a DDP communication hook: the codec; ``batches``: this rank's
    (x, y) of the first steps, on which ``adaptive`` times its plans)."""
    s = canonical(cfg.strategy)
    if s.startswith("ps-"):
        return _ps(cfg, model, device, hook)
    if s == "adaptive":
        return _adaptive(cfg, model, device, hook, batches)
    return BUILDERS[s](cfg, model, device, hook)


def state_bytes(params: list, optimizer) -> int:
    """Bytes this rank holds of parameters, gradients and optimizer state (the
    model state that sharding and model parallelism divide)."""

    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    total = 0
    for p in params:
        total += local(p).numel() * p.element_size()
        if p.grad is not None:
            total += local(p.grad).numel() * p.grad.element_size()
        for v in (optimizer.state.get(p, {}) if optimizer is not None else {}).values():
            if isinstance(v, torch.Tensor):
                total += local(v).numel() * v.element_size()
    return total
