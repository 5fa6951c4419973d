"""The direct API: collectives on any array, without torch.distributed calls.

``pyscalecomm.allreduce(x)`` reduces ``x`` in place across the group and
returns ``x`` itself: a torch tensor, or any array that exports its memory
through DLPack (``__dlpack__``): NumPy on the CPU, CuPy on the GPU, JAX. The
array is shared with the collective, not copied, so the caller's own object
holds the result; ``out=y`` leaves ``x`` as it is and writes the result into
``y``. ``compression="topk:0.01"`` (any codec of docs/compression.md) goes
through a codec with error feedback instead.

A synchronous call on a host array (NumPy, or a contiguous CPU tensor) on a
scalecomm group goes straight to the group, without torch's dispatch or a
Work: what an mpi4py user's ``comm.Allreduce`` compares with. Everything else
(CUDA and CuPy arrays, ``async_op``, codecs, other backends' groups) runs
through ``torch.distributed.all_reduce``.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from pyscalecomm import _C

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


_c10d = dist.distributed_c10d


def _scalecomm_backend(pg):
    """The scalecomm backend serving ``pg``'s CPU calls, or None (another
    backend, not a member): then the general path runs and explains. The
    fast path (a C function) asks once per group and keeps the answer
    weakly."""
    try:
        backend = pg._get_backend(torch.device("cpu"))
    except (RuntimeError, AttributeError, ValueError):
        return None
    return backend if isinstance(backend, _C.ScalecommBackend) else None


def _op_code(op) -> int:
    """The fast path's code for an op spelled other than a lower-case name."""
    return _C.direct_reduce_ops[_op_name(op)]


def _source(array) -> torch.Tensor:
    """A tensor of ``array``'s values to read (a read-only NumPy array too)."""
    flags = getattr(array, "flags", None)
    if (
        flags is not None
        and getattr(flags, "writeable", True) is False
        and hasattr(array, "__array_interface__")
    ):
        import numpy

        with warnings.catch_warnings():  # "not writable": it is only read
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(numpy.ascontiguousarray(array))
    return as_tensor(array, "allreduce")


def _copy_into(out, array) -> None:
    """``out`` := ``array`` (same shape and element type), refused by name otherwise."""
    dst, src = as_tensor(out, "allreduce"), _source(array)
    if dst.shape != src.shape or dst.dtype != src.dtype:
        raise ValueError(
            f"pyscalecomm.allreduce: out has shape {tuple(dst.shape)} and type {dst.dtype}, the input "
            f"{tuple(src.shape)} and {src.dtype}; they must match"
        )
    if dst.data_ptr() != src.data_ptr():
        dst.copy_(src)


def _allreduce(
    array,
    compression: str | None = None,
    *,
    op="sum",
    group=None,
    async_op: bool = False,
    key: str | None = None,
    error_feedback: bool | None = None,
    out=None,
):
    """Reduces ``array`` in place across ``group`` (default: the default
    group) and returns it (with ``async_op``: a handle whose ``wait()``
    finishes the call; the array holds the result after it). With ``out``
    (an array of the same shape and type): ``array`` is left as it is, the
    result goes into ``out``, which is returned (MPI's out-of-place form).

    ``op``: ``sum``, ``avg``, ``product``, ``min`` or ``max`` (any case), or
    torch's ``dist.ReduceOp.SUM`` and the others.
    ``compression``: a codec (``fp16``, ``bf16``, ``topk:0.01``, ...;
    docs/compression.md) for floating ``sum``/``avg``; ``key`` names the
    error-feedback state (default: the array's memory, for as long as the
    array, or the array it views, lives: an array made anew, even at a freed
    array's address, starts from zero error) and ``error_feedback``
    overrides the codec's default."""
    if out is not None:
        _copy_into(out, array)
        array = out
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


# pyscalecomm.allreduce: a C function that serves a synchronous allreduce of
# a host array (NumPy, a contiguous CPU tensor) on a scalecomm group itself,
# with no Python frame, torch dispatch or Work, and calls _allreduce for
# everything else.
allreduce = _C.direct_allreduce(_allreduce, _c10d._world, _C.direct_reduce_ops, _scalecomm_backend, _op_code)
