"""Timing of one measurement: back-to-back calls between barriers, the
statistics across ranks, the result check, and auto's settling before it is
timed."""

from __future__ import annotations

import time

from pyscalecomm import _C
from pyscalecomm.bench.specs import Case


def measure(run_once, case: Case, timing, iters: int, warmup: int, min_time: float = 0.0, check: bool = True):
    """Times back-to-back calls of ``run_once`` between barriers on the ``timing`` group.

    Returns per-call seconds {"min", "avg", "max" across ranks, "rank0",
    "cpu": the CPU time per call of every thread of a rank's process, the
    mean over ranks}, the number of wrong elements summed over ranks (-1 when
    not checked) and the iterations timed (doubled until the loop lasts
    ``min_time`` seconds).
    """
    import torch
    import torch.distributed as dist

    case.fill()
    for _ in range(warmup):
        run_once()
    while True:
        dist.barrier(group=timing)
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(iters):
            run_once()
        if case.out.is_cuda:
            torch.cuda.synchronize(case.out.device)  # async GPU work counts until it is done
        mine = (time.perf_counter() - start) / iters
        cpu = (time.process_time() - cpu_start) / iters
        t = torch.tensor([mine, -mine, mine, mine if dist.get_rank() == 0 else 0.0, cpu], dtype=torch.float64)
        dist.all_reduce(t[:2], op=dist.ReduceOp.MAX, group=timing)
        dist.all_reduce(t[2:], op=dist.ReduceOp.SUM, group=timing)
        n = dist.get_world_size()
        stats = {"max": t[0].item(), "min": -t[1].item(), "avg": t[2].item() / n}
        stats["rank0"], stats["cpu"] = t[3].item(), t[4].item() / n
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
    want = case.spec.expected(case).double()
    err = torch.tensor([float((case.out.double() - want).norm() / want.norm().clamp_min(1e-30))])
    dist.all_reduce(err, op=dist.ReduceOp.MAX, group=timing)
    return float(err.item())


def round_order(items, round_: int) -> list:
    """The order in which round `round_` of an interleaved measurement runs
    `items` (the same on every rank): a row of a balanced Latin square
    (Williams design). Over a cycle of len(items) rounds every item runs
    first once and right after every other item once (an odd count: a cycle
    of twice as many rounds, each of those twice), so none always runs in
    the state one predecessor leaves (a capped link's token bucket left full
    by slow calls, caches)."""
    items = list(items)
    n = len(items)
    if n < 2:
        return items
    base, lo, hi = [0], 1, n - 1
    while len(base) < n:  # 0, 1, n-1, 2, n-2, ...: consecutive differences all distinct mod n
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    k = round_ % (2 * n if n % 2 else n)
    order = [items[(b + k) % n] for b in base]
    return order[::-1] if k >= n else order


def settle_auto(fn, backend, nbytes: int, limit: int = 4000) -> None:
    """Runs auto until its online choice for this size has settled (its bucket
    exploits a winner), so the timed rounds measure the choice, not the
    exploration. The exploration runs unpaced (its trials back to back:
    set_auto_explore_percent(100)) and settles in a few hundred calls; then
    the group's share comes back, so a later re-exploration inside the timed
    rounds costs what it costs a user. The tuner decides alike on every rank
    after the same calls (algo/tuner.h), and a synchronous call's time is
    recorded before it returns, so every rank sees the bucket settle after
    the same call and stops there without asking the others: nothing but the
    settling calls runs between auto's trials (a collective on another group
    there slows some algorithms' trials more than others'), and every rank
    restores the share at the same point. Device calls are not measured
    (auto runs the model's choice): their bucket never settles, and every
    rank makes `limit` calls."""
    import torch.distributed as dist

    if backend.config.autotune != "online" or dist.get_world_size() == 1:
        return  # auto does not measure: nothing to settle
    bucket = _C.auto_bucket_bytes(nbytes)

    def settled() -> bool:
        return any(b["bytes"] == bucket and b["phase"] == "exploiting" for b in backend.tuning())

    if settled():
        return
    share = backend.set_auto_explore_percent(100)
    try:
        for i in range(1, limit + 1):
            fn()
            if i % 8 == 0 and settled():
                return
    finally:
        backend.set_auto_explore_percent(share)
