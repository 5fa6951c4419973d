"""The transport conformance body: every collective of the job's scalecomm
default group against gloo in the same processes, on the same inputs, for
every dtype both take and counts from empty to past a link's buffers.

``check_all(rank, n)`` runs on every rank (tests/test_conformance.py starts
the ranks once per transport and world size); it raises on the first
difference, naming the collective, dtype and count, and returns how many
results it compared. Inputs are small integers in every dtype, so sums are
exact in any order and the two backends must agree bit for bit. Run as a
script (under mpirun) it initialises the group itself and prints
``OK rank <r> <checks> checks``.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
]
# Elements per rank's block: none, one, fewer and more than the ranks, odd
# sizes that straddle segments, and one that crosses a ring many times.
COUNTS = [0, 1, 3, 1003, 70001]
LARGE = (1 << 20) + 5  # float32 and int64 only: 4-8 MiB per rank, past any link buffer
R = dist.ReduceOp


def _input(rank: int, count: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(7919 * rank + 31 * count + salt)
    low = 0 if dtype == torch.uint8 else -20
    return torch.randint(low, 21, (count,), generator=g).to(dtype)


def _same(ours: torch.Tensor, gloo: torch.Tensor, what: str) -> None:
    if not torch.equal(ours, gloo):
        bad = (ours != gloo).nonzero().flatten()
        at = int(bad[0])
        raise AssertionError(
            f"{what}: scalecomm and gloo differ at {bad.numel()} elements, first at {at}: "
            f"{ours[at].item()} vs {gloo[at].item()}"
        )


def _check(rank: int, n: int, gloo, count: int, dtype: torch.dtype) -> int:
    tag = f"rank {rank}/{n} {str(dtype).removeprefix('torch.')} count={count}"
    checks = 0
    x = _input(rank, count, dtype)

    for op in (R.SUM, R.MAX):
        a, b = x.clone(), x.clone()
        dist.all_reduce(a, op=op)
        dist.all_reduce(b, op=op, group=gloo)
        _same(a, b, f"all_reduce {op} {tag}")
        checks += 1

    root = n - 1
    a, b = x.clone(), x.clone()
    dist.broadcast(a, src=root)
    dist.broadcast(b, src=root, group=gloo)
    _same(a, b, f"broadcast from {root} {tag}")

    a, b = x.clone(), x.clone()
    dist.reduce(a, dst=0)
    dist.reduce(b, dst=0, group=gloo)
    if rank == 0:
        _same(a, b, f"reduce to 0 {tag}")

    outs = [torch.empty(n * count, dtype=dtype) for _ in range(2)]
    dist.all_gather_into_tensor(outs[0], x)
    dist.all_gather_into_tensor(outs[1], x, group=gloo)
    _same(outs[0], outs[1], f"all_gather_into_tensor {tag}")

    big = _input(rank, n * count, dtype, salt=1)
    outs = [torch.empty(count, dtype=dtype) for _ in range(2)]
    dist.reduce_scatter_tensor(outs[0], big.clone())
    dist.reduce_scatter_tensor(outs[1], big.clone(), group=gloo)
    _same(outs[0], outs[1], f"reduce_scatter_tensor {tag}")

    lists = [[torch.empty(count, dtype=dtype) for _ in range(n)] if rank == root else None for _ in range(2)]
    dist.gather(x, lists[0], dst=root)
    dist.gather(x, lists[1], dst=root, group=gloo)
    if rank == root:
        _same(torch.cat(lists[0]), torch.cat(lists[1]), f"gather to {root} {tag}")

    parts = [_input(r, count, dtype, salt=2) for r in range(n)] if rank == 0 else None
    outs = [torch.empty(count, dtype=dtype) for _ in range(2)]
    dist.scatter(outs[0], parts, src=0)
    dist.scatter(outs[1], parts, src=0, group=gloo)
    _same(outs[0], outs[1], f"scatter from 0 {tag}")

    # Uneven splits: rank r sends (r + peer) % 3 + count elements to each peer.
    send = [(rank + p) % 3 + count for p in range(n)]
    recv = [(p + rank) % 3 + count for p in range(n)]
    src = _input(rank, sum(send), dtype, salt=3)
    outs = [torch.empty(sum(recv), dtype=dtype) for _ in range(2)]
    dist.all_to_all_single(outs[0], src, recv, send)
    dist.all_to_all_single(outs[1], src, recv, send, group=gloo)
    _same(outs[0], outs[1], f"all_to_all_single {tag}")

    if n > 1:  # around the ring, posted together
        outs = [torch.empty(count, dtype=dtype) for _ in range(2)]
        for i, g in enumerate((None, gloo)):
            works = dist.batch_isend_irecv(
                [
                    dist.P2POp(dist.isend, x, (rank + 1) % n, group=g),
                    dist.P2POp(dist.irecv, outs[i], (rank - 1) % n, group=g),
                ]
            )
            for w in works:
                w.wait()
        _same(outs[0], outs[1], f"send/recv ring {tag}")
    return checks + 8


def check_all(rank: int, n: int) -> int:
    """Every collective x DTYPES x COUNTS (and LARGE for float32 and int64,
    unless CONFORMANCE_LARGE=0) against gloo; the number of results
    compared. Logs the operations the scalecomm group ran (by algorithm) to
    stderr."""
    gloo = dist.new_group(backend="gloo")
    checks = 0
    for count in COUNTS:
        for dtype in DTYPES:
            checks += _check(rank, n, gloo, count, dtype)
    if os.environ.get("CONFORMANCE_LARGE", "1") != "0":
        for dtype in (torch.float32, torch.int64):
            checks += _check(rank, n, gloo, LARGE, dtype)
    dist.barrier()
    ran = sorted(dist.group.WORLD._get_backend(torch.device("cpu")).stats())
    print(f"conformance rank {rank}: ran {' '.join(ran)}", file=sys.stderr, flush=True)
    return checks


if __name__ == "__main__":
    import pyscalecomm  # noqa: F401  (registers the backend; fills RANK etc. under mpirun)

    dist.init_process_group("scalecomm")
    r, size = dist.get_rank(), dist.get_world_size()
    done = check_all(r, size)
    dist.destroy_process_group()
    print(f"OK rank {r} {done} checks", flush=True)
