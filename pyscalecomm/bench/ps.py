"""The parameter server's benchmark rows (``bench --collectives ps``): per
size (the model's gradient, in 16 keys) and server count S = 1 .. world, every
rank pushes its gradient and pulls the parameters in async mode; a row gives
the slowest rank's time per step, the requests (pushes + pulls) and bytes the
servers handle per second together, and the speedup over one server; over
scalecomm and gloo when it is a baseline."""

from __future__ import annotations

import statistics
import time

from pyscalecomm.bench.rows import noisy_note, spread_of


def run_ps(args, size_list: list[int], n: int, out, progress) -> list[dict]:
    """The parameter server's rows (see the module's doc); its JSON records."""
    backends = ["scalecomm", *(b for b in args.baselines if b == "gloo")]
    keys = 16
    out(f"#\n# ps: async, {keys} keys, servers ranks 0..S-1, {n} workers; time = the slowest rank's")
    out(
        f"# {'size':>10} {'backend':>10} {'servers':>7} | {'step(us)':>9} {'±%':>4} {'requests/s':>11}"
        f" {'GB/s':>7} | {'vs 1 server':>11}"
    )
    records = []
    for size in size_list:
        nbytes = max(4 * keys, size - size % (4 * keys))
        rounds: dict[tuple[str, int], list[float]] = {(b, s): [] for b in backends for s in range(1, n + 1)}
        for _ in range(args.rounds):
            for b, s in rounds:
                progress(f"ps {nbytes} B {b} {s} server(s)")
                rounds[(b, s)].append(
                    ps_step_seconds(s, nbytes, keys, args.iters, args.warmup_iters, backend=b)
                )
        for (b, s), ts in rounds.items():
            t = statistics.median(ts)  # the median round, as the collectives' rows
            spread = spread_of(ts, t)
            note = noisy_note(spread)
            one = statistics.median(rounds[(b, 1)])
            requests = 2 * n * s / t  # every worker pushes and pulls each shard every step
            moved = 2 * n * nbytes / t
            out(
                f"  {nbytes:>10} {b:>10} {s:>7} | {1e6 * t:>9.1f} {50 * spread:>4.0f} {requests:>11.0f}"
                f" {moved / 1e9:>7.3f} | {one / t:>10.2f}x {note}".rstrip(),
                flush=True,
            )
            records.append(
                {
                    "collective": "ps",
                    "bytes": nbytes,
                    "backend": b,
                    "servers": s,
                    "world": n,
                    "keys": keys,
                    "time_us": 1e6 * t,
                    "time_us_rounds": [1e6 * x for x in ts],
                    "requests_per_s": requests,
                    "GBps": moved / 1e9,  # pushed and pulled, all servers
                }
            )
    return records


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
