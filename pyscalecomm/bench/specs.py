"""The collectives the benchmark measures: one :class:`Spec` each.

A spec says everything the benchmark needs to know about one collective: how
its buffers are laid out (and so which in-place form it has), the inputs
each rank writes, the closed-form result, the busbw factor, and how torch
and MPI run it. Adding a collective is adding one spec to :data:`SPECS`.

Sizes follow nccl-tests: ``count`` is the element count of the whole buffer a
collective moves (allgather: the gathered output; reduce_scatter: the input;
alltoall: one rank's send buffer), so algbw = bytes / time is comparable with
nccl-tests' tables, and busbw = algbw x :func:`busbw_factor`.

In place means what nccl-tests means (the spec's ``layout``):
- ``whole``: one buffer of ``count`` elements on every rank; in place is one
  tensor. torch's calls are in place only, so the out-of-place form copies
  the input into the output first and runs in place (what a user who needs
  both buffers pays);
- ``gather``: the output is whole, the input one rank's block of it (in
  place: that block of the output);
- ``scatter``: the input is whole, the output one rank's block (in place:
  that block of the input);
- ``exchange``: both whole, no in-place form.

Inputs are small integers chosen so every result has a closed form, exact in
every dtype; :meth:`Case.wrong` counts the elements that differ from it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass


def _combine(op: str, values) -> float:
    """``op`` over the integers ``values`` (exact for the small inputs used)."""
    values = list(values)
    if op in ("sum", "avg"):
        total = float(sum(values))
        return total / len(values) if op == "avg" else total
    if op == "prod":
        out = 1.0
        for v in values:
            out *= v
        return out
    return float(min(values) if op == "min" else max(values))


@dataclass
class Case:
    """Buffers of one measurement: one collective, size, dtype, in place or not."""

    spec: Spec
    count: int  # elements of the whole buffer (see the module doc)
    inplace: bool
    rank: int
    n: int
    root: int
    op: str
    inp: object = None  # torch tensors; out aliases inp (or a block of it) where in place
    out: object = None

    @property
    def collective(self) -> str:
        return self.spec.name

    @property
    def per(self) -> int:
        """Elements of one rank's block (the whole buffer where nothing is split)."""
        return self.count if self.spec.layout == "whole" else self.count // self.n

    def reduced(self) -> float:
        """The reduction of every rank's input (rank r contributes r + 1)."""
        return _combine(self.op, range(1, self.n + 1))

    def fill(self) -> None:
        """Writes this rank's inputs (and poisons the output where it is separate)."""
        if self.out is not self.inp:  # separate, or a view of one block: poison the rest
            self.out.fill_(-1 if self.out.dtype.is_signed else 0)
        self.spec.fill(self)

    def wrong(self) -> int:
        want = self.spec.expected(self)
        if want is None:
            return 0
        return int((self.out.reshape(-1) != want.reshape(-1)).sum())


def _per_rank_blocks(case: Case, values):
    """A whole buffer whose block q holds ``values[q]`` (a tensor of n values)."""
    return values.to(case.out.dtype).repeat_interleave(case.per).to(case.out.device)


def _torch():
    import torch
    import torch.distributed as dist

    return torch, dist


# -- torch's calls: (case, group, reduce op) -> one call ------------------------------------------


def _torch_allreduce(case, group, op):
    return lambda t: _torch()[1].all_reduce(t, op=op, group=group)


def _torch_broadcast(case, group, op):
    return lambda t: _torch()[1].broadcast(t, src=case.root, group=group)


def _torch_reduce(case, group, op):
    return lambda t: _torch()[1].reduce(t, dst=case.root, op=op, group=group)


def _torch_allgather(case, group, op):
    dist = _torch()[1]
    # torch 2.14 renamed all_gather_into_tensor / reduce_scatter_tensor (the old names warn).
    gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    return lambda: gather(case.out, case.inp, group=group)


def _torch_reduce_scatter(case, group, op):
    dist = _torch()[1]
    scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
    return lambda: scatter(case.out, case.inp, op=op, group=group)


def _torch_alltoall(case, group, op):
    return lambda: _torch()[1].all_to_all_single(case.out, case.inp, group=group)


# -- MPI's calls through mpi4py on the same buffers: (case, comm, MPI op) -> a callable -----------


def _mpi_allreduce(case, comm, mop):
    from mpi4py import MPI

    inp, out = case.inp.numpy(), case.out.numpy()
    if case.inplace:
        return lambda: comm.Allreduce(MPI.IN_PLACE, out, mop)
    return lambda: comm.Allreduce(inp, out, mop)


def _mpi_broadcast(case, comm, mop):
    inp, out = case.inp.numpy(), case.out.numpy()
    if case.inplace:
        return lambda: comm.Bcast(out, case.root)

    def copy_bcast():
        out[...] = inp
        comm.Bcast(out, case.root)

    return copy_bcast


def _mpi_reduce(case, comm, mop):
    from mpi4py import MPI

    inp, out, root = case.inp.numpy(), case.out.numpy(), case.root
    if not case.inplace:
        return lambda: comm.Reduce(inp, out, mop, root)
    at_root = comm.Get_rank() == root
    return lambda: comm.Reduce(MPI.IN_PLACE if at_root else out, out if at_root else None, mop, root)


def _mpi_allgather(case, comm, mop):
    from mpi4py import MPI

    inp, out = case.inp.numpy(), case.out.numpy()
    return (lambda: comm.Allgather(MPI.IN_PLACE, out)) if case.inplace else (lambda: comm.Allgather(inp, out))


def _mpi_reduce_scatter(case, comm, mop):
    from mpi4py import MPI

    inp, out, per, rank = case.inp.numpy(), case.out.numpy(), case.per, case.rank
    if not case.inplace:
        return lambda: comm.Reduce_scatter_block(inp, out, mop)

    def in_place():
        comm.Reduce_scatter_block(MPI.IN_PLACE, inp, mop)
        if rank:  # MPI leaves the result at the front; nccl-tests' layout wants block `rank`
            inp[rank * per : (rank + 1) * per] = inp[:per]

    return in_place


def _mpi_alltoall(case, comm, mop):
    inp, out = case.inp.numpy(), case.out.numpy()
    return lambda: comm.Alltoall(inp, out)


# -- the specs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One collective as the benchmark sees it (see the module doc)."""

    name: str
    layout: str  # whole | gather | scatter | exchange
    reduces: bool  # takes a reduction op
    rooted: bool  # takes a root rank
    fill: Callable[[Case], None]  # this rank's input
    expected: Callable[[Case], object]  # the result this rank must hold (None: nothing to check)
    torch_call: Callable  # (case, group, reduce op) -> a call (whole layout: of the tensor to work on)
    mpi_call: Callable  # (case, comm, MPI op) -> a no-argument callable

    def busbw_factor(self, n: int) -> float:
        """nccl-tests' bus bandwidth factor (the core's, which the groups' own stats use too)."""
        from pyscalecomm import _C

        return _C.busbw_factor(self.name, n)

    @property
    def has_inplace(self) -> bool:
        return self.layout != "exchange"


def _fill_rank(case: Case) -> None:
    case.inp.fill_(case.rank + 1)


def _fill_alltoall(case: Case) -> None:
    torch, _ = _torch()
    n, r = case.n, case.rank
    blocks = (torch.arange(n, dtype=torch.int64) + r * n + 1).to(case.inp.device)
    case.inp.view(n, case.per).copy_(blocks.view(n, 1).expand(n, case.per) % 100)


def _full(case: Case, value: float):
    return _torch()[0].full_like(case.out, value)


SPECS: dict[str, Spec] = {
    s.name: s
    for s in (
        Spec(
            "allreduce",
            "whole",
            reduces=True,
            rooted=False,
            fill=_fill_rank,
            expected=lambda c: _full(c, c.reduced()),
            torch_call=_torch_allreduce,
            mpi_call=_mpi_allreduce,
        ),
        Spec(
            "broadcast",
            "whole",
            reduces=False,
            rooted=True,
            fill=lambda c: c.inp.fill_(c.root + 1 if c.rank == c.root else 0),
            expected=lambda c: _full(c, c.root + 1),
            torch_call=_torch_broadcast,
            mpi_call=_mpi_broadcast,
        ),
        Spec(
            "reduce",
            "whole",
            reduces=True,
            rooted=True,
            fill=_fill_rank,
            expected=lambda c: _full(c, c.reduced()) if c.rank == c.root else None,
            torch_call=_torch_reduce,
            mpi_call=_mpi_reduce,
        ),
        Spec(
            "allgather",
            "gather",
            reduces=False,
            rooted=False,
            fill=_fill_rank,
            expected=lambda c: _per_rank_blocks(c, _torch()[0].arange(c.n) + 1),
            torch_call=_torch_allgather,
            mpi_call=_mpi_allgather,
        ),
        Spec(
            "reduce_scatter",
            "scatter",
            reduces=True,
            rooted=False,
            fill=_fill_rank,
            expected=lambda c: _full(c, c.reduced()),
            torch_call=_torch_reduce_scatter,
            mpi_call=_mpi_reduce_scatter,
        ),
        Spec(
            "alltoall",
            "exchange",
            reduces=False,
            rooted=False,
            fill=_fill_alltoall,
            # block q of rank r's output is rank q's block r
            expected=lambda c: _per_rank_blocks(c, (_torch()[0].arange(c.n) * c.n + c.rank + 1) % 100),
            torch_call=_torch_alltoall,
            mpi_call=_mpi_alltoall,
        ),
    )
}
COLLECTIVES = list(SPECS)


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus bandwidth factors: allreduce 2(n-1)/n; reduce_scatter,
    allgather, alltoall (n-1)/n; broadcast, reduce 1."""
    return SPECS[collective].busbw_factor(n)


def known_algorithms() -> list[str]:
    """Every name ``--algos`` takes: some selectable collective's algorithm
    (auto, scalecomm's own, the native ones), from the algorithm table."""
    from pyscalecomm import accepted_algorithms

    names = set()
    for c in COLLECTIVES:
        names.update(accepted_algorithms(c) if c != "alltoall" else [])
    return sorted(names)


def algorithm_applies(collective: str, algo: str) -> bool:
    """Whether ``algo`` can be given to ``collective`` (others run its default)."""
    if collective == "alltoall":
        return False  # one schedule: nothing to choose
    from pyscalecomm import accepted_algorithms

    return algo in accepted_algorithms(collective)


def element_count(collective: str, nbytes: int, esize: int, n: int) -> int:
    """Elements of the whole buffer for a requested size (a multiple of n where split per rank)."""
    count = max(1, nbytes // esize)
    if SPECS[collective].layout != "whole":
        count = max(n, count - count % n)
    return count


def make_case(collective, count, dtype, rank, n, inplace, root=0, op="sum", device="cpu") -> Case | None:
    """Allocates the buffers, or returns None where the collective has no in-place form."""
    import torch

    spec = SPECS[collective]
    if inplace and not spec.has_inplace:
        return None
    empty = functools.partial(torch.empty, dtype=dtype, device=device)
    case = Case(spec, count, inplace, rank, n, root, op)
    per = case.per
    if spec.layout == "gather":
        case.out = empty(count)
        case.inp = case.out.narrow(0, rank * per, per) if inplace else empty(per)
    elif spec.layout == "scatter":
        case.inp = empty(count)
        case.out = case.inp.narrow(0, rank * per, per) if inplace else empty(per)
    else:
        case.inp = empty(count)
        case.out = case.inp if inplace else empty(count)
    return case


def torch_runner(case: Case, group, reduce_op):
    """A no-argument callable running the collective once through torch.distributed."""
    call = case.spec.torch_call(case, group, reduce_op)
    if case.spec.layout != "whole":
        return call
    if case.inplace:
        return lambda: call(case.out)
    inp, out = case.inp, case.out

    def copy_then_run():
        out.copy_(inp)
        call(out)

    return copy_then_run


_MPI_OPS = {"sum": "SUM", "prod": "PROD", "min": "MIN", "max": "MAX"}


def mpi_runner(case: Case, comm, op: str):
    """A callable running the collective with MPI's own implementation (mpi4py on
    the same buffers), or None where MPI has no such type or op."""
    import torch
    from mpi4py import MPI

    if case.inp.dtype in (torch.float16, torch.bfloat16) or op not in _MPI_OPS:
        return None
    return case.spec.mpi_call(case, comm, getattr(MPI, _MPI_OPS[op]))


def deepspeed_op(rank: int, n: int):
    """DeepSpeed's CPU shared-memory allreduce op for the ``n`` ranks of this
    host (its kernel built on first use, as DeepSpeed does), initialised for
    ``rank``; None where DeepSpeed does not import."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
    except ImportError:
        return None
    os.environ.setdefault("LOCAL_SIZE", str(n))
    op = ShareMemCommBuilder().load(verbose=False)
    op.initialize(n, rank)
    return op


_DEEPSPEED_TYPES = ("float32", "bfloat16", "float16")


def deepspeed_runner(case: Case, op: str):
    """DeepSpeed's in-place allreduce (``torch.ops.deepspeed.inference_all_reduce_``)
    on the case's buffer, or None where it has no such call: another
    collective, out of place, an op but sum, another type."""
    import torch

    if case.collective != "allreduce" or not case.inplace or op != "sum":
        return None
    if str(case.out.dtype).removeprefix("torch.") not in _DEEPSPEED_TYPES:
        return None
    buffer = case.out
    return lambda: torch.ops.deepspeed.inference_all_reduce_(buffer)


def wire_bytes(spec: str, count: int) -> int | None:
    """Bytes one rank sends into the compressed allreduce of ``count`` float32
    elements; None for ``auto`` (they follow its choice)."""
    from pyscalecomm import _C

    return None if spec == "auto" else int(_C.compressed_wire_bytes(spec, count))
