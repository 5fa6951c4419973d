"""DDP communication hooks that use scalecomm's compressed allreduce.

    model.register_comm_hook(None, pyscalecomm.hooks.compressed(codec="topk", ratio=0.01))

The hook averages each gradient bucket across the group through the codec,
with error feedback kept by the backend per bucket (see pyscalecomm.compress).
``state`` may be a process group (a scalecomm group) or None (the default group).
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations
# (bucket: dist.GradBucket, return: Future[Tensor]) as objects.
import torch
import torch.distributed as dist

from pyscalecomm.compress import _backend


def codec_spec(
    codec: str, ratio: float | None = None, levels: int | None = None, rank: int | None = None
) -> str:
    """ "topk" + ratio=0.01 -> "topk:0.01"; a full spec ("qsgd:8") passes through."""
    if ":" in codec:
        return codec
    arg = {"topk": ratio, "topk_sampled": ratio, "randomk": ratio, "qsgd": levels, "powersgd": rank}.get(
        codec
    )
    return f"{codec}:{arg}" if arg is not None else codec


def compressed(
    codec: str = "topk",
    ratio: float | None = 0.01,
    levels: int | None = None,
    rank: int | None = None,
    error_feedback: bool | None = None,
):
    """A DDP comm hook: ``hook(state, bucket) -> Future[Tensor]`` (the averaged bucket)."""
    spec = codec_spec(codec, ratio, levels, rank)
    ef = -1 if error_feedback is None else int(bool(error_feedback))

    def hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = state if isinstance(state, dist.ProcessGroup) else None
        buf = bucket.buffer()
        be = _backend(group, buf.device)
        fut = be.allreduce_compressed(buf, spec, f"ddp-bucket-{bucket.index()}", ef, True)
        return fut.then(lambda f: f.value()[0])

    hook.__name__ = f"scalecomm_compressed_{spec}"
    return hook
