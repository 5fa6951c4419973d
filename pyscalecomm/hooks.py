"""DDP communication hooks that use scalecomm's compressed allreduce.

    model.register_comm_hook(None, pyscalecomm.hooks.compressed("topk:0.01"))

The hook averages each gradient bucket across the group through the codec,
with error feedback kept by the backend per bucket (see pyscalecomm.compress).
``state`` may be a process group (a scalecomm group) or None (the default group).
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

    def hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = state if isinstance(state, dist.ProcessGroup) else None
        buf = bucket.buffer()
        be = _backend(group, buf.device)
        if spec.startswith("powersgd"):
            return _per_matrix(be, group, bucket, spec, ef)
        fut = be.allreduce_compressed(buf, spec, f"ddp-bucket-{bucket.index()}", ef, True)
        return fut.then(lambda f: f.value()[0])

    hook.__name__ = f"scalecomm_compressed_{spec}"
    return hook


def _per_matrix(be, group, bucket: dist.GradBucket, spec: str, ef: int) -> torch.futures.Future[torch.Tensor]:
    """PowerSGD per weight, in the weight's own shape (rows x the rest), as a
    low-rank approximation of a layer's gradient should be (a bucket flattened
    into one square matrix mixes layers and loses the low rank: measured, it
    diverges); vectors (biases, norms) are averaged uncompressed in one
    allreduce, as PyTorch's PowerSGD hook does."""
    buf = bucket.buffer()
    futs, vectors, off = [], [], 0
    for i, p in enumerate(bucket.parameters()):
        n = p.numel()
        view = buf[off : off + n]
        if p.dim() >= 2:
            key = f"ddp-bucket-{bucket.index()}-{i}"
            futs.append(be.allreduce_compressed(view.view(p.shape[0], -1), spec, key, ef, True))
        else:
            vectors.append((off, n))
        off += n
    flat = None
    if vectors:
        flat = torch.cat([buf[o : o + n] for o, n in vectors])
        futs.append(dist.all_reduce(flat, group=group, async_op=True).get_future())
    size = dist.get_world_size(group)

    def done(all_done):
        for f in all_done.value():
            f.value()  # re-raises a failed part (a timed-out or aborted collective)
        if flat is not None:
            at = 0
            for o, n in vectors:
                buf[o : o + n].copy_(flat[at : at + n]).div_(size)
                at += n
        return buf

    return torch.futures.collect_all(futs).then(done)
