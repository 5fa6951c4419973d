"""One training configuration of the driver, and the sweep grid over them.

``parse_sweep(["world=1,2,4", "backend=gloo,scalecomm", "compress=none,topk:0.01"])``
-> the list of overrides, one dict per grid point (the product of the axes,
in the order given). Sweepable keys are the fields of :class:`RunConfig`.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

BACKENDS = ("scalecomm", "gloo", "nccl")


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
    calib_steps: int = 5  # compute-only steps (no_sync) to measure exposed communication

    def label(self) -> str:
        return (
            f"world={self.world} threads={self.threads} backend={self.backend} compress={self.compress}"
            + (f" algo={self.algo}" if self.backend == "scalecomm" and self.algo != "auto" else "")
        )

    def check(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}: choose one of {', '.join(BACKENDS)}")
        if self.world < 1 or self.threads < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ValueError("world, threads, epochs and batch_size must be >= 1")
        if self.bucket_mb < 0:
            raise ValueError("bucket_mb must be >= 0 (0: DDP's default buckets)")
        if self.compress != "none" and self.backend != "scalecomm":
            name = self.compress.split(":")[0]
            if name not in ("fp16", "bf16", "powersgd"):
                raise ValueError(
                    f"compress={self.compress} needs backend=scalecomm; PyTorch's own DDP hooks "
                    f"give {self.backend} only fp16, bf16 and powersgd:<rank>"
                )
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
        axes.append([(key, convert(key, v)) for v in values.split(",") if v])
    return [dict(point) for point in itertools.product(*axes)] if axes else [{}]


def expand(base: RunConfig, items: list[str]) -> tuple[list[RunConfig], list[str]]:
    """The sweep's configurations, and why grid points were left out.

    A point that pairs a codec with a backend that cannot run it (top-k on
    gloo) is left out when the grid has other points, with its reason; any
    other invalid value raises ValueError."""
    points = [dataclasses.replace(base, **point) for point in parse_sweep(items)]
    configs, skipped = [], []
    for c in points:
        try:
            c.check()
            configs.append(c)
        except ValueError as e:
            if len(points) == 1 or "needs backend=scalecomm" not in str(e):
                raise
            skipped.append(f"{c.label()}: {e}")
    return configs, skipped
