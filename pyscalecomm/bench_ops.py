"""The collectives the benchmark measures: buffers, result checks and runners.

Sizes follow nccl-tests: ``count`` is the element count of the whole buffer a
collective moves (allgather: the gathered output; reduce_scatter: the input;
alltoall: one rank's send buffer), so algbw = bytes / time is comparable with
nccl-tests' tables, and busbw = algbw x :func:`busbw_factor`.

In place means what nccl-tests means: allreduce, broadcast and reduce work on
one tensor; allgather's input is this rank's block of the output;
reduce_scatter's output is this rank's block of the input; alltoall has no
in-place form. torch's allreduce, broadcast and reduce are in place only, so
their out-of-place form copies the input into the output first and runs in
place (what a user who needs both buffers pays).

Inputs are small integers chosen so every result has a closed form, exact in
every dtype; ``wrong()`` counts the elements that differ from it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

COLLECTIVES = ["allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall"]


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus bandwidth factors: allreduce 2(n-1)/n; reduce_scatter,
    allgather, alltoall (n-1)/n; broadcast, reduce 1 (the core's, which the
    groups' own stats use too)."""
    from pyscalecomm import _C

    return _C.busbw_factor(collective, n)


def known_algorithms() -> list[str]:
    """Every name ``--algos`` takes: some collective's algorithm, auto, mpi or nccl."""
    from pyscalecomm import algorithms

    names = {"auto", "mpi", "nccl"}
    for c in ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter"):
        names.update(algorithms(c))
    return sorted(names)


def algorithm_applies(collective: str, algo: str) -> bool:
    """Whether ``algo`` can be given to ``collective`` (others run its default)."""
    if collective == "alltoall":
        return False
    from pyscalecomm import algorithms

    return algo in {*algorithms(collective), "auto", "mpi", *(["nccl"] if collective == "allreduce" else [])}


def element_count(collective: str, nbytes: int, esize: int, n: int) -> int:
    """Elements of the whole buffer for a requested size (a multiple of n where split per rank)."""
    count = max(1, nbytes // esize)
    if collective in ("allgather", "reduce_scatter", "alltoall"):
        count = max(n, count - count % n)
    return count


def _combine(op: str, values: list[int]) -> float:
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

    collective: str
    count: int  # elements of the whole buffer (see module doc)
    inplace: bool
    rank: int
    n: int
    root: int
    op: str
    inp: object = None  # torch tensors; out aliases inp where in place
    out: object = None

    @property
    def per(self) -> int:
        return (
            self.count // self.n
            if self.collective in ("allgather", "reduce_scatter", "alltoall")
            else self.count
        )

    def fill(self) -> None:
        """Writes this rank's inputs (and poisons the output where it is separate)."""
        import torch

        r, n, per = self.rank, self.n, self.per
        c = self.collective
        if self.out is not self.inp:  # separate or a view holding this rank's block: poison the rest
            self.out.fill_(-1 if self.out.dtype.is_signed else 0)
        if c == "broadcast":
            self.inp.fill_(self.root + 1 if r == self.root else 0)
        elif c == "allgather":
            self.inp.fill_(r + 1)
        elif c == "alltoall":
            blocks = (torch.arange(n, dtype=torch.int64) + r * n + 1).to(self.inp.device)
            self.inp.view(n, per).copy_(blocks.view(n, 1).expand(n, per) % 100)
        else:  # allreduce, reduce, reduce_scatter
            self.inp.fill_(r + 1)

    def expected(self):
        """The tensor (or None: nothing to check on this rank) the result must equal."""
        import torch

        r, n, per = self.rank, self.n, self.per
        c = self.collective
        ranks = list(range(1, n + 1))
        if c == "allreduce":
            return torch.full_like(self.out, _combine(self.op, ranks))
        if c == "reduce":
            return torch.full_like(self.out, _combine(self.op, ranks)) if r == self.root else None
        if c == "broadcast":
            return torch.full_like(self.out, self.root + 1)
        if c == "reduce_scatter":
            return torch.full_like(self.out, _combine(self.op, ranks))
        if c == "allgather":
            want = torch.arange(n).repeat_interleave(per) + 1
            return want.to(self.out.dtype).to(self.out.device)
        # alltoall: block q of rank r's output is rank q's block r
        want = ((torch.arange(n) * n + r + 1) % 100).repeat_interleave(per)
        return want.to(self.out.dtype).to(self.out.device)

    def wrong(self) -> int:
        want = self.expected()
        if want is None:
            return 0
        return int((self.out.reshape(-1) != want.reshape(-1)).sum())


def make_case(collective, count, dtype, rank, n, inplace, root=0, op="sum", device="cpu"):
    """Allocates the buffers, or returns None where the collective has no in-place form."""
    import functools

    import torch

    empty = functools.partial(torch.empty, dtype=dtype, device=device)

    case = Case(collective, count, inplace, rank, n, root, op)
    per = case.per
    if collective == "alltoall":
        if inplace:
            return None
        case.inp, case.out = empty(count), empty(count)
    elif collective == "allgather":
        case.out = empty(count)
        case.inp = case.out.narrow(0, rank * per, per) if inplace else empty(per)
    elif collective == "reduce_scatter":
        case.inp = empty(count)
        case.out = case.inp.narrow(0, rank * per, per) if inplace else empty(per)
    else:
        case.inp = empty(count)
        case.out = case.inp if inplace else empty(count)
    return case


def torch_runner(case: Case, group, reduce_op):
    """A no-argument callable running the collective once through torch.distributed."""
    import torch.distributed as dist

    c, inp, out, root = case.collective, case.inp, case.out, case.root
    if c in ("allreduce", "broadcast", "reduce"):
        call = {
            "allreduce": lambda t: dist.all_reduce(t, op=reduce_op, group=group),
            "broadcast": lambda t: dist.broadcast(t, src=root, group=group),
            "reduce": lambda t: dist.reduce(t, dst=root, op=reduce_op, group=group),
        }[c]
        if case.inplace:
            return lambda: call(inp)

        def copy_then_run():
            out.copy_(inp)
            call(out)

        return copy_then_run
    # torch 2.14 renamed all_gather_into_tensor / reduce_scatter_tensor (the old names warn).
    gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
    if c == "allgather":
        return lambda: gather(out, inp, group=group)
    if c == "reduce_scatter":
        return lambda: scatter(out, inp, op=reduce_op, group=group)
    return lambda: dist.all_to_all_single(out, inp, group=group)


_MPI_OPS = {"sum": "SUM", "prod": "PROD", "min": "MIN", "max": "MAX"}


def mpi_runner(case: Case, comm, op: str):
    """A callable running the collective with MPI's own implementation (mpi4py on
    the same buffers), or None where MPI has no such type or op."""
    import torch
    from mpi4py import MPI

    if case.inp.dtype in (torch.float16, torch.bfloat16) or op not in _MPI_OPS:
        return None
    mop = getattr(MPI, _MPI_OPS[op])
    c, root = case.collective, case.root
    inp, out = case.inp.numpy(), case.out.numpy()
    ip = case.inplace
    if c == "allreduce":
        return (
            (lambda: comm.Allreduce(MPI.IN_PLACE, out, mop))
            if ip
            else (lambda: comm.Allreduce(inp, out, mop))
        )
    if c == "broadcast":
        if ip:
            return lambda: comm.Bcast(out, root)

        def copy_bcast():
            out[...] = inp
            comm.Bcast(out, root)

        return copy_bcast
    if c == "reduce":
        if ip:
            at_root = comm.Get_rank() == root
            return lambda: comm.Reduce(MPI.IN_PLACE if at_root else out, out if at_root else None, mop, root)
        return lambda: comm.Reduce(inp, out, mop, root)
    if c == "allgather":
        return (lambda: comm.Allgather(MPI.IN_PLACE, out)) if ip else (lambda: comm.Allgather(inp, out))
    if c == "reduce_scatter":
        if ip:
            full = case.inp.numpy()
            per = case.per
            rank = case.rank

            def in_place_rs():
                comm.Reduce_scatter_block(MPI.IN_PLACE, full, mop)
                if rank:  # MPI leaves the result at the front; nccl-tests' layout wants block `rank`
                    full[rank * per : (rank + 1) * per] = full[:per]

            return in_place_rs
        return lambda: comm.Reduce_scatter_block(inp, out, mop)
    return lambda: comm.Alltoall(inp, out)


def measure(run_once, case: Case, timing, iters: int, warmup: int, min_time: float = 0.0, check: bool = True):
    """Times back-to-back calls of ``run_once`` between barriers on the ``timing`` group.

    Returns per-call seconds {"min", "avg", "max" across ranks, "rank0"}, the
    number of wrong elements summed over ranks (-1 when not checked) and the
    iterations timed (doubled until the loop lasts ``min_time`` seconds).
    """
    import torch
    import torch.distributed as dist

    case.fill()
    for _ in range(warmup):
        run_once()
    while True:
        dist.barrier(group=timing)
        start = time.perf_counter()
        for _ in range(iters):
            run_once()
        if case.out.is_cuda:
            torch.cuda.synchronize(case.out.device)  # async GPU work counts until it is done
        mine = (time.perf_counter() - start) / iters
        t = torch.tensor([mine, -mine, mine, mine if dist.get_rank() == 0 else 0.0], dtype=torch.float64)
        dist.all_reduce(t[:2], op=dist.ReduceOp.MAX, group=timing)
        dist.all_reduce(t[2:], op=dist.ReduceOp.SUM, group=timing)
        stats = {"max": t[0].item(), "min": -t[1].item(), "avg": t[2].item() / dist.get_world_size()}
        stats["rank0"] = t[3].item()
        if stats["max"] * iters >= min_time or iters >= 1 << 20:
            break
        iters *= 2
    wrong = -1
    if check:
        case.fill()
        run_once()
        w = torch.tensor([case.wrong()], dtype=torch.int64)
        dist.all_reduce(w, group=timing)
        wrong = int(w.item())
    return stats, wrong, iters


def relative_error(run_once, case: Case, timing) -> float:
    """||result - exact|| / ||exact||, the largest over ranks (lossy compressed rows)."""
    import torch
    import torch.distributed as dist

    case.fill()
    run_once()
    want = case.expected().double()
    err = torch.tensor([float((case.out.double() - want).norm() / want.norm().clamp_min(1e-30))])
    dist.all_reduce(err, op=dist.ReduceOp.MAX, group=timing)
    return float(err.item())


def wire_bytes(spec: str, count: int) -> int:
    """Bytes one rank sends into the compressed allreduce of ``count`` float32 elements."""
    from pyscalecomm import _C

    return int(_C.compressed_wire_bytes(spec, count))


def ps_step_seconds(servers: int, nbytes: int, keys: int, iters: int, warmup: int, backend: str) -> float:
    """The parameter server's time per step (the slowest rank's): every rank
    pushes a float32 gradient of ``nbytes`` in ``keys`` keys and pulls the
    parameters back, ``async`` mode (a push answered at once: the servers'
    handling is the bound, not a barrier), servers ranks 0..servers-1 over
    ``backend``. Collective: every rank calls it with the same arguments."""
    import torch
    import torch.distributed as dist
    from torch import nn

    from pyscalecomm.ps import ParameterServer

    numel = max(1, nbytes // 4 // keys)

    class Keys(nn.Module):
        def __init__(self):
            super().__init__()
            self.keys = nn.ParameterList(nn.Parameter(torch.zeros(numel)) for _ in range(keys))

        def forward(self):
            return sum(p.sum() for p in self.keys)

    model = ParameterServer(Keys(), servers=servers, mode="async", optimizer="sgd", lr=1e-9, backend=backend)
    for _ in range(warmup):
        model().backward()
    model.refresh()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        model().backward()
    model.refresh()
    mine = torch.tensor([(time.perf_counter() - t0) / max(1, iters)], dtype=torch.float64)
    model.close()
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine)
