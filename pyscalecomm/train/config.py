"""One training configuration of the driver, and the sweep grid over them.

``parse_sweep(["world=1,2,4", "backend=gloo,scalecomm", "compress=none,topk:0.01"])``
-> the list of overrides, one dict per grid point (the product of the axes,
in the order given). Sweepable keys are the fields of :class:`RunConfig`.
An axis over several keys at once lists their values together, separated
by "/": ``backend/compress=gloo/none,scalecomm/topk:0.01`` is two points,
not the four of the product.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

BACKENDS = ("scalecomm", "gloo", "nccl")
PIPELINES = ("pp", "dp+pp")  # the strategies with a pipeline schedule and microbatches


class Incompatible(ValueError):
    """A grid point whose values cannot go together (a codec on a backend
    without it, a hybrid strategy on too few ranks): left out of a sweep that
    has other points, an error for a single run."""


def parse_straggler(text: str) -> tuple[str, int, float]:
    """("none"|"rank"|"random", rank, factor) from "none", "rank:R:F" (rank R
    always F times slower) or "random:F" (each step one rank, drawn from the
    seed, F times slower)."""
    parts = text.split(":")
    try:
        if parts == ["none"]:
            return "none", -1, 1.0
        if parts[0] == "rank" and len(parts) == 3 and float(parts[2]) >= 1:
            return "rank", int(parts[1]), float(parts[2])
        if parts[0] == "random" and len(parts) == 2 and float(parts[1]) >= 1:
            return "random", -1, float(parts[1])
    except ValueError:
        pass
    raise ValueError(
        f"straggler={text!r}: write none, rank:R:F (rank R always F x slower) or random:F "
        f"(each step a random rank F x slower), F >= 1"
    )


@dataclass
class RunConfig:
    model: str = "mlp"
    width: int = 256
    data: str = "digits"
    samples: int = 2048  # synthetic data only
    world: int = 1
    threads: int = 1  # intra-op threads per rank (vertical scaling)
    backend: str = "scalecomm"
    algo: str = "auto"  # scalecomm's allreduce algorithm
    compress: str = "none"
    bucket_mb: float = 0.0  # DDP bucket cap in MiB; 0: DDP's default (a 1 MiB first bucket, then 25)
    epochs: int = 5
    steps: int = 0  # steps per epoch (0: the whole training set)
    batch_size: int = 32  # per rank
    lr: float = 0.05
    seed: int = 0
    device: str = "cpu"
    calib_steps: int = 5  # compute-only steps (no communication) to measure exposed communication
    strategy: str = "allreduce"  # see pyscalecomm.train.strategies: allreduce (ddp), fsdp, tp, pp, dp+tp, ...
    mesh: str = ""  # hybrid strategies: "DxM" (data-parallel x model-parallel); "": (world/2) x 2
    microbatches: int = 4  # pipeline strategies: microbatches per step
    pp_schedule: str = "1f1b"  # pipeline strategies: gpipe | 1f1b
    ps_servers: int = 1  # ps strategies: server ranks 0..S-1
    straggler: str = "none"  # none | rank:R:F | random:F (see parse_straggler)
    max_state_mb: float = 0  # strategy=adaptive: plans holding more model state per rank left out (0: no cap)

    def __post_init__(self):
        if self.strategy == "ddp":  # the same strategy: DDP's allreduce
            self.strategy = "allreduce"

    def label(self) -> str:
        return (
            f"world={self.world} threads={self.threads} backend={self.backend} compress={self.compress}"
            + (f" algo={self.algo}" if self.backend == "scalecomm" and self.algo != "auto" else "")
            + (f" strategy={self.strategy}" if self.strategy != "allreduce" else "")
            + (f" mesh={self.mesh}" if self.mesh else "")
            + (f" schedule={self.pp_schedule}/{self.microbatches}" if self.strategy in PIPELINES else "")
            + (
                f" servers={self.ps_servers}"
                if self.strategy.startswith("ps-") and self.ps_servers != 1
                else ""
            )
            + (f" straggler={self.straggler}" if self.straggler != "none" else "")
            + (f" max_state_mb={self.max_state_mb:g}" if self.max_state_mb else "")
        )

    def applicable(self) -> RunConfig:
        """This configuration with the keys its strategy does not use (servers
        of a parameter server, a hybrid's mesh, a pipeline's schedule) at
        their defaults, so that a sweep over them runs every other strategy once."""
        from pyscalecomm.train.strategies import HYBRID

        d, unused = RunConfig(), {}
        if not self.strategy.startswith("ps-"):
            unused["ps_servers"] = d.ps_servers
        if self.strategy not in HYBRID:
            unused["mesh"] = d.mesh
        if self.strategy not in PIPELINES:
            unused.update(microbatches=d.microbatches, pp_schedule=d.pp_schedule)
        if self.strategy != "adaptive":
            unused["max_state_mb"] = d.max_state_mb
        return dataclasses.replace(self, **unused)

    def check(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}: choose one of {', '.join(BACKENDS)}")
        if self.world < 1 or self.threads < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ValueError("world, threads, epochs and batch_size must be >= 1")
        if self.algo != "auto":
            from pyscalecomm import algorithms

            known = [*algorithms("allreduce"), "mpi", "nccl"]  # the last two: MPI's and NCCL's own
            if self.algo not in known:
                raise ValueError(f"algo={self.algo!r}: choose auto or one of {', '.join(known)}")
        if self.bucket_mb < 0:
            raise ValueError("bucket_mb must be >= 0 (0: DDP's default buckets)")
        if self.compress != "none":
            from pyscalecomm import _C

            try:
                _C.codec_spec(self.compress)  # the codec table's parser: names the choices
            except ValueError as e:
                raise ValueError(f"compress={self.compress}: {e}") from None
        if self.compress == "auto" and self.device != "cpu":
            raise Incompatible("compress=auto chooses among scalecomm's host codecs: CPU only (name a codec)")
        if self.compress != "none" and self.backend != "scalecomm" and self.strategy == "allreduce":
            name = self.compress.split(":")[0]
            if name not in ("fp16", "bf16", "powersgd"):
                raise Incompatible(
                    f"compress={self.compress} needs backend=scalecomm; PyTorch's own DDP hooks "
                    f"give {self.backend} only fp16, bf16 and powersgd:<rank>"
                )
        from pyscalecomm.train import models, strategies

        if self.strategy.startswith("ps-"):
            from pyscalecomm.ps import parse_mode

            parse_mode(self.strategy[3:])
            if not 1 <= self.ps_servers <= self.world:
                raise ValueError(f"ps_servers={self.ps_servers}: give 1..world ({self.world})")
            if self.device != "cpu" or self.compress.startswith("powersgd") or self.compress == "auto":
                raise ValueError(
                    f"strategy={self.strategy} runs on the CPU, with a named codec but powersgd "
                    f"(pushes are one message)"
                )
        elif strategies.canonical(self.strategy) not in (*strategies.BUILDERS, "adaptive"):
            raise ValueError(f"strategy {self.strategy!r}: choose one of {', '.join(strategies.NAMES)}")
        elif self.strategy != "allreduce" and self.world == 1:
            raise Incompatible(
                "a strategy other than allreduce needs 2 or more ranks (1 rank: the reference run)"
            )
        else:
            try:
                dp, mp = strategies.mesh_shape(self.strategy, self.world, self.mesh)
            except ValueError as e:
                raise Incompatible(str(e)) from None
            if self.strategy != "allreduce" and self.compress != "none":
                raise Incompatible(
                    f"compress={self.compress} compresses DDP's gradients: use strategy=allreduce"
                )
            if self.strategy in ("tp", "dp+tp") and not strategies.has_tp_plan(self.model):
                with_plan = [m for m in models.MODELS if strategies.has_tp_plan(m)]
                raise Incompatible(
                    f"strategy={self.strategy} needs a tensor-parallel plan: model {' or '.join(with_plan)}"
                )
            if (mp > 1 or self.strategy == "adaptive") and self.device != "cpu":
                raise ValueError(f"strategy={self.strategy} runs on the CPU in this driver")
            if self.max_state_mb < 0:
                raise ValueError("max_state_mb must be >= 0 (0: no cap)")
            if self.strategy in PIPELINES:
                if self.pp_schedule not in strategies.PP_SCHEDULES:
                    raise ValueError(f"pp_schedule={self.pp_schedule!r}: choose gpipe or 1f1b")
                if self.microbatches < 1 or (self.batch_size * self.world // dp) % self.microbatches:
                    raise ValueError(
                        f"microbatches={self.microbatches}: must divide the pipeline's batch "
                        f"({self.batch_size * self.world // dp} = batch_size x world / {dp} data-parallel)"
                    )
        kind, rank, _ = parse_straggler(self.straggler)
        if kind == "rank" and not 0 <= rank < self.world:
            raise ValueError(f"straggler={self.straggler}: rank {rank} is not in 0..{self.world - 1}")
        if self.backend == "nccl" and self.device != "cuda":
            raise ValueError("backend=nccl trains on GPUs: add --device cuda")


FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}


def convert(key: str, text: str):
    if key not in FIELDS:
        raise ValueError(f"unknown sweep key {key!r}; sweepable: {', '.join(FIELDS)}")
    kind = type(getattr(RunConfig(), key))
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{key}={text!r}: expected {kind.__name__}") from None


def parse_sweep(items: list[str]) -> list[dict]:
    axes = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise ValueError(f"sweep axis {item!r}: write key=v1,v2 (e.g. world=1,2,4)")
        keys = key.split("/")
        axis = []
        for value in (v for v in values.split(",") if v):
            parts = value.split("/")
            if len(parts) != len(keys):
                raise ValueError(
                    f"sweep axis {item!r}: {value!r} gives {len(parts)} value(s) for the {len(keys)} keys "
                    f"{key}; write one per key, separated by '/'"
                )
            axis.append([(k, convert(k, v)) for k, v in zip(keys, parts, strict=True)])
        axes.append(axis)
    return [dict(kv for part in point for kv in part) for point in itertools.product(*axes)] if axes else [{}]


def expand(base: RunConfig, items: list[str]) -> tuple[list[RunConfig], list[tuple[str, str]]]:
    """The sweep's configurations, and the grid points left out: (label, why).

    In a grid, the keys a point's strategy does not use are set to their
    defaults (:meth:`RunConfig.applicable`), and the points this makes equal
    run once.

    A point whose values cannot go together (:class:`Incompatible`: top-k on
    gloo, a hybrid strategy on one rank) is left out when the grid has other
    points, with its reason; any other invalid value raises ValueError."""
    points = [dataclasses.replace(base, **point) for point in parse_sweep(items)]
    if len(points) > 1:  # a key a strategy does not use makes no copies of its run
        used = [c.applicable() for c in points]
        points = [c for i, c in enumerate(used) if c not in used[:i]]
    configs, skipped = [], []
    for c in points:
        try:
            c.check()
            configs.append(c)
        except ValueError as e:
            if len(points) == 1 or not isinstance(e, Incompatible):
                raise
            skipped.append((c.label(), str(e)))
    return configs, skipped
