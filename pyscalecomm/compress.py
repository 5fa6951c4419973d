"""Compressed allreduce: codecs with error feedback, kept by the backend.

``allreduce(tensor, compression="topk:0.01")`` sums (or, with ``average``,
averages) a floating tensor across the group through a codec; the residual
that the codec dropped is kept per ``key`` and added back on the next call
(error feedback, on by default for the biased codecs: topk, topk_sampled,
randomk, sign, powersgd). ``state_dict()`` / ``load_state_dict()`` save and
restore the residuals with a checkpoint; ``reset()`` forgets them.

Codecs (wire formats in csrc/compress/codec.h): ``fp16``, ``bf16``,
``topk:<ratio>``, ``topk_sampled:<ratio>``, ``randomk:<ratio>``,
``qsgd:<levels>``, ``sign``, ``powersgd:<rank>``; and ``auto``, a codec
chosen per key from measured costs (``choices()`` says which and why).
Summable payloads (fp16,
bf16, randomk, PowerSGD's factors) travel by allreduce, the others by
allgather with a decode-and-accumulate; the profiler title names both
(``scalecomm:allreduce:ring:topk:0.01``).
"""

from __future__ import annotations

import weakref

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


# Error-feedback state of arrays that the caller did not name (key=None),
# per backend (its compression_state_id): the key (their memory) -> a weak reference to the object that
# owns that memory. A key whose owner died, or that another object's memory
# now has (the allocator reused the address), starts afresh.
_owners: dict[int, dict[str, weakref.ref]] = {}
_dead: dict[int, set[str]] = {}


def _memory_owner(array):
    """The object whose lifetime bounds ``array``'s memory: the array, or the
    array it is a view of (NumPy's ``base`` chain, while the bases can be
    referenced weakly)."""
    owner = array
    base = getattr(owner, "base", None)
    while base is not None:
        try:
            weakref.ref(base)
        except TypeError:
            break
        owner = base
        base = getattr(owner, "base", None)
    return owner


def _key_for_memory(be, tensor: torch.Tensor, array) -> str:
    """The state key of ``array`` (shared with the backend as ``tensor``):
    its memory, owned by ``array``'s memory owner for as long as that lives."""
    owners = _owners.setdefault(be.compression_state_id, {})
    dead = _dead.setdefault(be.compression_state_id, set())
    while dead:  # owners freed since the last call: their residuals go too
        k = dead.pop()
        ref = owners.get(k)
        if ref is not None and ref() is None:
            del owners[k]
            be.forget_compression_state(k)
    key = f"ptr:{tensor.data_ptr()}:{tensor.numel()}:{tensor.dtype}"
    owner = _memory_owner(array)
    ref = owners.get(key)
    if ref is None or ref() is not owner:
        if ref is not None:
            be.forget_compression_state(key)
        owners[key] = weakref.ref(owner, lambda _r, k=key, d=dead: d.add(k))
    return key


def allreduce(
    tensor: torch.Tensor,
    compression: str,
    group=None,
    key: str | None = None,
    error_feedback: bool | None = None,
    average: bool = False,
    async_op: bool = False,
    array=None,
):
    """Allreduce ``tensor`` in place through ``compression``.

    ``key`` names the error-feedback state. Without one, the state belongs to
    the tensor's memory for as long as the tensor's storage lives (a reused
    gradient buffer keeps it; a tensor freed and another made at the same
    address starts afresh). ``array``: the caller's array that ``tensor``
    shares memory with (NumPy, CuPy through DLPack); its lifetime then bounds
    the state instead. Returns a ``torch.futures.Future`` of ``[tensor]``
    when ``async_op``, else None.
    """
    be = _backend(group, tensor.device)
    if key is None:
        key = "" if array is None or array is tensor else _key_for_memory(be, tensor, array)
    ef = -1 if error_feedback is None else int(bool(error_feedback))
    fut = be.allreduce_compressed(tensor, compression, key, ef, average, blocking=not async_op)
    if async_op:
        return fut
    fut.wait()
    return None


def state_dict(group=None, device: str = "cpu") -> dict:
    """Copies of the residuals (and PowerSGD's Q) per key, for a checkpoint."""
    return _backend(group, torch.device(device)).compression_state()


def load_state_dict(state: dict, group=None, device: str = "cpu") -> None:
    _backend(group, torch.device(device)).load_compression_state(state)


def choices(group=None, device: str = "cpu") -> list[dict]:
    """``compression="auto"``'s latest decision per key, the same on every
    rank: ``choice`` (the codec it runs), ``predicted_s`` (every candidate's
    predicted seconds per call: measured codec cost plus the group's link fit
    at its bytes), ``residual_ratio`` (the share of the key's recent
    gradient that each codec's error-feedback residual holds back along it,
    where it ran or was replayed; a codec not yet measured is absent: its least-served
    weight's where the key's weights are known; a codec above
    ``compression_auto_bound`` percent is left out, and one not yet run,
    whose share is its replay's, above half of it), ``period_s`` (the
    time from one of the key's calls to the next with each candidate, where
    measured: the training step it makes; a codec whose period is longer
    than none's is left), ``link_alpha_s``,
    ``link_bus_gbps``, ``step`` (the key's call it was made at, counted
    since the key's tensor came: a tensor of another size starts over),
    ``changes`` and ``reason`` (one line)."""
    return _backend(group, torch.device(device)).compression_choices()


def reset(group=None, device: str = "cpu") -> None:
    """Forgets every residual; the next call starts from zero error."""
    _backend(group, torch.device(device)).reset_compression_state()
