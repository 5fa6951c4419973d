"""The direct API: collectives on any array, without torch.distributed calls.

``pyscalecomm.allreduce(x)`` reduces ``x`` in place across the group and
returns ``x`` itself: a torch tensor, or any array that exports its memory
through DLPack (``__dlpack__``): NumPy on the CPU, CuPy on the GPU, JAX. The
array is shared with the collective, not copied, so the caller's own object
holds the result. ``compression="topk:0.01"`` (any codec of
docs/compression.md) goes through a codec with error feedback instead.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
}
_ALIASES = {"prod": "product", "mean": "avg", "average": "avg"}


def _op_name(op) -> str:
    """``op`` as one of _OPS: a name in any case ("SUM", "max", "prod") or
    torch's ``dist.ReduceOp.SUM`` (and the others); ValueError otherwise."""
    if isinstance(op, str):
        name = _ALIASES.get(op.lower(), op.lower())
        if name in _OPS:
            return name
    else:
        for name, value in _OPS.items():
            try:
                if op == value:
                    return name
            except (TypeError, RuntimeError):
                break
    raise ValueError(
        f"pyscalecomm.allreduce: op {op!r} is not one of {', '.join(_OPS)} "
        f"(any case) or torch.distributed.ReduceOp.SUM/AVG/PRODUCT/MIN/MAX"
    )


def reduce_op(op) -> dist.ReduceOp:
    """torch's ReduceOp for ``op`` as _op_name takes it ("sum", "PROD", ReduceOp.MAX, ...)."""
    return _OPS[_op_name(op)]


def as_tensor(array, collective: str) -> torch.Tensor:
    """A torch tensor sharing ``array``'s memory (the array itself when it is
    a tensor). Refuses what a collective cannot write into in place: arrays
    without DLPack, read-only arrays and non-contiguous ones."""
    if isinstance(array, torch.Tensor):
        return array
    name = type(array).__module__.split(".")[0] + "." + type(array).__name__
    if not hasattr(array, "__dlpack__"):
        raise TypeError(
            f"pyscalecomm.{collective}: takes a torch.Tensor or an array with __dlpack__ (NumPy, CuPy, JAX); "
            f"got {name}. Wrap it first, e.g. numpy.asarray(x)"
        )
    flags = getattr(array, "flags", None)
    if flags is not None and getattr(flags, "writeable", True) is False:
        raise ValueError(
            f"pyscalecomm.{collective}: the {name} is read-only and the result is written into it; "
            f"pass a writable copy (x.copy())"
        )
    try:
        tensor = torch.from_dlpack(array)
    except (BufferError, RuntimeError, TypeError) as e:
        raise ValueError(
            f"pyscalecomm.{collective}: cannot share the memory of this {name} through DLPack: {e}"
        ) from e
    if not tensor.is_contiguous():
        raise ValueError(
            f"pyscalecomm.{collective}: the {name} is not contiguous "
            f"(strides {tuple(tensor.stride())} elements); "
            f"the result is written in place, so pass a contiguous one (numpy.ascontiguousarray(x), "
            f"cupy.ascontiguousarray(x)) and use it"
        )
    return tensor


def allreduce(
    array,
    compression: str | None = None,
    *,
    op="sum",
    group=None,
    async_op: bool = False,
    key: str | None = None,
    error_feedback: bool | None = None,
):
    """Reduces ``array`` in place across ``group`` (default: the default
    group) and returns it (with ``async_op``: a handle whose ``wait()``
    finishes the call; the array holds the result after it).

    ``op``: ``sum``, ``avg``, ``product``, ``min`` or ``max`` (any case), or
    torch's ``dist.ReduceOp.SUM`` and the others.
    ``compression``: a codec (``fp16``, ``bf16``, ``topk:0.01``, ...;
    docs/compression.md) for floating ``sum``/``avg``; ``key`` names the
    error-feedback state (default: the array's memory, for as long as the
    array, or the array it views, lives: an array made anew, even at a freed
    array's address, starts from zero error) and ``error_feedback``
    overrides the codec's default."""
    op = _op_name(op)
    tensor = as_tensor(array, "allreduce")
    if compression is None:
        work = dist.all_reduce(tensor, op=_OPS[op], group=group, async_op=async_op)
        return work if async_op else array
    if op not in ("sum", "avg"):
        raise ValueError(
            f"pyscalecomm.allreduce: compression {compression!r} sums or averages; op {op!r} cannot"
        )
    from pyscalecomm.compress import allreduce as compressed

    fut = compressed(
        tensor,
        compression,
        group=group,
        key=key,
        error_feedback=error_feedback,
        average=op == "avg",
        async_op=async_op,
        array=array,
    )
    return fut if async_op else array
