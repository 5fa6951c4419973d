"""Compressed allreduce: codecs with error feedback, kept by the backend.

``allreduce(tensor, compression="topk:0.01")`` sums (or, with ``average``,
averages) a floating tensor across the group through a codec; the residual
that the codec dropped is kept per ``key`` and added back on the next call
(error feedback, on by default for the biased codecs: topk, topk_sampled,
randomk, sign, powersgd). ``state_dict()`` / ``load_state_dict()`` save and
restore the residuals with a checkpoint; ``reset()`` forgets them.

Codecs (wire formats in csrc/compress/codec.h): ``fp16``, ``bf16``,
``topk:<ratio>``, ``topk_sampled:<ratio>``, ``randomk:<ratio>``,
``qsgd:<levels>``, ``sign``, ``powersgd:<rank>``. Summable payloads (fp16,
bf16, randomk, PowerSGD's factors) travel by allreduce, the others by
allgather with a decode-and-accumulate; the profiler title names both
(``scalecomm:allreduce:ring:topk:0.01``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _backend(group, device: torch.device):
    pg = group if group is not None else dist.group.WORLD
    be = pg._get_backend(torch.device(device.type))
    if not hasattr(be, "allreduce_compressed"):
        raise ValueError(
            f"pyscalecomm.allreduce(compression=...) needs a scalecomm group for {device.type} tensors; "
            f"this group uses {type(be).__name__}"
        )
    return be


def allreduce(
    tensor: torch.Tensor,
    compression: str,
    group=None,
    key: str | None = None,
    error_feedback: bool | None = None,
    average: bool = False,
    async_op: bool = False,
):
    """Allreduce ``tensor`` in place through ``compression``.

    ``key`` names the error-feedback state (default: the tensor's memory
    address and size, stable for a reused gradient buffer). Returns a
    ``torch.futures.Future`` of ``[tensor]`` when ``async_op``, else None.
    """
    be = _backend(group, tensor.device)
    if key is None:
        key = f"ptr:{tensor.data_ptr()}:{tensor.numel()}"
    ef = -1 if error_feedback is None else int(bool(error_feedback))
    fut = be.allreduce_compressed(tensor, compression, key, ef, average)
    if async_op:
        return fut
    fut.wait()
    return None


def state_dict(group=None, device: str = "cpu") -> dict:
    """Copies of the residuals (and PowerSGD's Q) per key, for a checkpoint."""
    return _backend(group, torch.device(device)).compression_state()


def load_state_dict(state: dict, group=None, device: str = "cpu") -> None:
    _backend(group, torch.device(device)).load_compression_state(state)


def reset(group=None, device: str = "cpu") -> None:
    """Forgets every residual; the next call starts from zero error."""
    _backend(group, torch.device(device)).reset_compression_state()
