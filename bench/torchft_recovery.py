"""What a torchft quorum change costs on scalecomm against torchft's gloo group.

    python bench/torchft_recovery.py [--ranks 3] [--rounds 7] [--abort-timeout 5]

Ranks are threads of one process, as in torchft's own tests. In each round,
for each backend in turn (the order alternates between rounds):

- reconfigure: every rank's ``configure()`` under a fresh store prefix (the
  old group aborted, a new one built), then one 8-byte allreduce: the time
  until the last rank has its result;
- abort: all ranks but the last wait in an allreduce the last never joins,
  and another thread calls ``abort()`` on each: the time from the abort to
  the last waiter's release. A backend whose abort does not wake its waiters
  releases them only at the group's timeout (``--abort-timeout``).

Prints the median of the rounds with half their range as a share of it.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import torch
from torch.distributed import TCPStore
from torch.distributed.distributed_c10d import AllreduceOptions, ReduceOp
from torchft.process_group import ProcessGroupGloo

from pyscalecomm.bench.rows import noisy_note, spread_of
from pyscalecomm.torchft import ProcessGroupScalecomm

BACKENDS = {"scalecomm": ProcessGroupScalecomm, "gloo": ProcessGroupGloo}


def _allreduce(pg, value):
    x = torch.tensor([float(value)])
    opts = AllreduceOptions()
    opts.reduceOp = ReduceOp.SUM
    pg.allreduce([x], opts).wait()
    return x.item()


def reconfigure_s(pgs, pool, addr):
    n = len(pgs)

    def one(rank):
        pgs[rank].configure(addr, "0", rank, n)
        return _allreduce(pgs[rank], 1)

    start = time.perf_counter()
    sums = list(pool.map(one, range(n)))
    elapsed = time.perf_counter() - start
    assert sums == [float(n)] * n, sums
    return elapsed


def abort_release_s(pgs):
    waiting = pgs[:-1]
    released = []

    def waiter(pg):
        try:
            _allreduce(pg, 1)
        except Exception:
            released.append(time.perf_counter())

    threads = [threading.Thread(target=waiter, args=(pg,)) for pg in waiting]
    for t in threads:
        t.start()
    time.sleep(0.3)  # every waiter is inside the allreduce
    aborted_at = time.perf_counter()
    for pg in waiting:
        pg.abort()
    for t in threads:
        t.join()
    assert len(released) == len(waiting), "a waiter returned without an error"
    return max(released) - aborted_at


def cell(xs):
    """The median in ms, ± half the rounds' range, and the bench's noisy flag."""
    m = statistics.median(xs)
    s = spread_of(xs, m)
    return f"{m * 1000:.1f} ±{50 * s:.0f}% {noisy_note(s)}".rstrip()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=3, help="ranks (threads) per group (default: 3)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds, median reported (default: 7)")
    p.add_argument(
        "--abort-timeout",
        type=float,
        default=5.0,
        help="the groups' timeout in seconds, the bound on a waiter that abort() does not wake (default: 5)",
    )
    args = p.parse_args(argv)
    store = TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    timeout = timedelta(seconds=args.abort_timeout)
    pgs = {name: [cls(timeout=timeout) for _ in range(args.ranks)] for name, cls in BACKENDS.items()}
    results = {name: {"reconfigure": [], "abort": []} for name in BACKENDS}
    with ThreadPoolExecutor(args.ranks) as pool:
        for r in range(args.rounds):
            order = list(BACKENDS) if r % 2 == 0 else list(reversed(BACKENDS))
            for name in order:
                addr = f"localhost:{store.port}/{name}_{r}"
                results[name]["reconfigure"].append(reconfigure_s(pgs[name], pool, addr + "_a"))
                reconfigure_s(pgs[name], pool, addr + "_b")  # a fresh group to abort
                results[name]["abort"].append(abort_release_s(pgs[name]))
                pgs[name][-1].abort()
    print(f"# {args.ranks} ranks as threads of one process, median of {args.rounds} rounds, ±half the range")
    print("| backend | reconfigure + first allreduce (ms) | abort -> last waiter released (ms) |")
    print("| --- | ---: | ---: |")
    for name in BACKENDS:
        print(f"| {name} | {cell(results[name]['reconfigure'])} | {cell(results[name]['abort'])} |")
    for pg_list in pgs.values():
        for pg in pg_list:
            pg.shutdown()


if __name__ == "__main__":
    main()
