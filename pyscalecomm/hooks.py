"""DDP communication hooks that use scalecomm's compressed allreduce.

    pyscalecomm.hooks.register(model, "topk:0.01")      # the hook in C++
    model.register_comm_hook(None, pyscalecomm.hooks.compressed("topk:0.01"))

Either hook averages each gradient bucket across the DDP module's group
through the codec, with error feedback kept by the backend per bucket (key
``ddp-bucket-<index>``; see pyscalecomm.compress). ``register`` gives DDP's
reducer a C++ hook: no Python runs per bucket. ``compressed`` is the same
call as a Python function for ``register_comm_hook`` (``state`` a scalecomm
process group or None, the default group), for code that wraps or composes
hooks.
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations
# (bucket: dist.GradBucket, return: Future[Tensor]) as objects.
import warnings

import torch
import torch.distributed as dist

from pyscalecomm.compress import _backend


def codec_spec(
    codec: str, ratio: float | None = None, levels: int | None = None, rank: int | None = None
) -> str:
    """ "topk" + ratio=0.01 -> "topk:0.01"; a full spec ("qsgd:8") passes
    through. The codec table says which argument a codec takes; a bad or
    incomplete spec raises ValueError naming the choices, here, not at the
    first backward."""
    from pyscalecomm import _C

    if ":" not in codec:
        takes = {c["name"]: c["arg"] for c in _C.codec_registry()}.get(codec, "")
        arg = {"ratio": ratio, "levels": levels, "rank": rank}.get(takes)
        if arg is not None:
            codec = f"{codec}:{arg}"
    _C.codec_spec(codec)  # checks it (the backend parses the same text on every call)
    return codec


def compressed(
    compression: str | None = None,
    *,
    error_feedback: bool | None = None,
    codec: str | None = None,
    ratio: float | None = None,
    levels: int | None = None,
    rank: int | None = None,
):
    """A DDP comm hook: ``hook(state, bucket) -> Future[Tensor]`` (the averaged bucket).

    ``compression`` is a codec spec as everywhere else (``"topk:0.01"``,
    ``"powersgd:4"``, ``"fp16"``; docs/compression.md). The keywords
    ``codec=``, ``ratio=``, ``levels=`` and ``rank=`` (and no spec at all,
    which meant top-k 1 %) are the old spelling: still taken, with a
    FutureWarning, until the next release."""
    old = {"codec": codec, "ratio": ratio, "levels": levels, "rank": rank}
    if compression is None or any(v is not None for v in old.values()):
        if compression is not None:
            raise ValueError(
                "pyscalecomm.hooks.compressed: give the spec (e.g. 'topk:0.01') or codec=..., not both"
            )
        compression = codec_spec(codec or "topk", 0.01 if ratio is None else ratio, levels, rank)
        warnings.warn(
            f"pyscalecomm.hooks.compressed(codec=..., ratio=...) is now compressed({compression!r})",
            FutureWarning,
            stacklevel=2,
        )
    spec = codec_spec(compression)
    ef = -1 if error_feedback is None else int(bool(error_feedback))
    # PowerSGD (named, or a candidate of auto) factors each weight in its
    # own shape (a bucket flattened into one matrix mixes layers and loses
    # the low rank: measured, it diverges); 1-D weights (biases, norms)
    # are summed exactly, in the same allreduce as the first factors.
    from pyscalecomm import _C

    shaped = _C.compression_takes_shapes(spec)

    def hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = state if isinstance(state, dist.ProcessGroup) else None
        buf = bucket.buffer()
        be = _backend(group, buf.device)
        shapes = [list(p.shape) for p in bucket.parameters()] if shaped else []
        fut = be.allreduce_compressed(buf, spec, f"ddp-bucket-{bucket.index()}", ef, True, shapes=shapes)
        return fut.then(lambda f: f.value()[0])

    hook.__name__ = f"scalecomm_compressed_{spec}"
    return hook


def register(ddp, compression: str, *, error_feedback: bool | None = None) -> None:
    """Gives ``ddp`` (a DistributedDataParallel module on a scalecomm group)
    scalecomm's compressed allreduce as its comm hook, run in C++ by DDP's
    reducer: each bucket averaged through ``compression`` (a codec spec, or
    ``"auto"``). As ``ddp.register_comm_hook``, once per module, before the
    first backward."""
    from pyscalecomm import _C

    if not isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
        raise TypeError(
            f"pyscalecomm.hooks.register: takes a DistributedDataParallel module, not {type(ddp).__name__}"
        )
    if getattr(ddp, "_use_python_reducer", False):
        raise ValueError(
            "pyscalecomm.hooks.register: this DDP module reduces in Python (compiled DDP); "
            "use ddp.register_comm_hook(None, pyscalecomm.hooks.compressed(...))"
        )
    spec = codec_spec(compression)
    ef = -1 if error_feedback is None else int(bool(error_feedback))
    be = _backend(ddp.process_group, torch.device(ddp.device_type))
    _C.register_ddp_hook(ddp.reducer, be, spec, ef)
    ddp.logger._set_comm_hook_name(f"scalecomm_compressed_{spec}")
