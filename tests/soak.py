"""Soak and chaos run: many random collectives on 3-4 ranks, with ranks killed, delayed and aborted.

Run by hand (not part of the default test run; a few minutes):

    python tests/soak.py --minutes 3
    python tests/soak.py --minutes 10 --ranks 4 --transports shm,tcp --seed 7

Each episode makes a fresh group (random world size, transport and allreduce
algorithm) and runs a sequence of collectives drawn from one seed (every rank
draws the same sequence): allreduce (sum, max, min), broadcast, reduce,
allgather, reduce_scatter, all_to_all_single, gather, scatter, barrier and a
send/recv ring, of random sizes and dtypes. Every input is a small integer
pattern of (rank, step), so each rank computes every exact result itself.

About half the episodes inject one fault at a random step: a rank is killed
(SIGKILL), delayed (a sleep well within the timeout: results must stay exact),
aborts its group, names itself the root of a broadcast the others root
elsewhere, uses other codec parameters in a compressed allreduce, stops the
store's host (rank 0, SIGSTOP past the timeout), or exits with a thread inside
a collective. The summary counts the episodes of each fault. The run fails,
naming the episode's seed, if any of these invariants breaks:

- no crash: every rank but a killed one reports back;
- no wrong result: every completed call matches the exact result, and after
  ranks disagree on a root or a codec every rank fails (none goes on);
- no hang: a survivor's failing call raises within the group timeout + 5 s,
  and without a fault no call fails;
- no leak: no /dev/shm/scalecomm-* name is left after the episode.

A failed episode is replayed with ``--seed S --episodes 1``.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dist_helpers import RankError, run_ranks  # noqa: E402

KINDS = [
    "allreduce",
    "broadcast",
    "reduce",
    "allgather",
    "reduce_scatter",
    "all_to_all",
    "gather",
    "scatter",
    "barrier",
    "sendrecv",
]
DTYPES = ["float32", "float64", "bfloat16", "float16", "int32", "int64"]
# kill: SIGKILL; delay: a sleep within the timeout; abort: abort() and leave;
# root: one rank names itself the root of a broadcast the others root elsewhere;
# codec: one rank's compressed allreduce uses other codec parameters;
# stop_store: another rank SIGSTOPs rank 0 (which hosts the store) past the timeout;
# exit: the process exits (the interpreter's exit hook) with a thread inside a collective.
FAULTS = ["kill", "delay", "abort", "root", "codec", "stop_store", "exit"]
GROUP_TIMEOUT_S = 6
RING_BYTES = 1 << 20  # SCALECOMM_SHM_RING_BYTES: small, so large messages wrap the rings
GRACE_S = 5


def plan(seed: int, n: int, steps: int) -> list[dict]:
    """The episode's calls, the same on every rank."""
    rnd = random.Random(seed)
    calls = []
    for step in range(steps):
        kind = rnd.choice(KINDS)
        size_class = rnd.random()
        count = rnd.randint(0, 64) if size_class < 0.5 else rnd.randint(65, 1 << 14)
        if size_class > 0.95:
            count = rnd.randint(1 << 16, 1 << 18)
        calls.append(
            {
                "step": step,
                "kind": kind,
                "count": count,
                "dtype": rnd.choice(DTYPES),
                "op": rnd.choice(["sum", "max", "min"]),
                "root": rnd.randrange(n),
                "batched": rnd.random() < 0.5,
            }
        )
    return calls


def _inputs(torch, rank: int, step: int, count: int, dtype):
    # Small integers: sums over 4 ranks stay exact in every dtype here.
    return ((torch.arange(count, dtype=torch.int64) * (rank + 1) + step) % 9 - 4).to(dtype)


def _run_call(torch, dist, c: dict, rank: int, n: int):
    """Runs one call; returns None when its result is exact, else a description."""
    dtype = getattr(torch, c["dtype"])
    step, count, kind, root = c["step"], c["count"], c["kind"], c["root"]
    x = [_inputs(torch, r, step, count, dtype) for r in range(n)]
    mine = x[rank].clone()
    op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[c["op"]]

    def reduced(chunks):
        stacked = torch.stack([t.to(torch.float64) for t in chunks])
        if c["op"] == "sum":
            return stacked.sum(dim=0).to(dtype)
        return (stacked.max(dim=0) if c["op"] == "max" else stacked.min(dim=0)).values.to(dtype)

    if kind == "allreduce":
        dist.all_reduce(mine, op=op)
        ok = torch.equal(mine, reduced(x))
    elif kind == "broadcast":
        dist.broadcast(mine, src=root)
        ok = torch.equal(mine, x[root])
    elif kind == "reduce":
        dist.reduce(mine, dst=root, op=op)
        ok = rank != root or torch.equal(mine, reduced(x))
    elif kind == "allgather":
        out = torch.empty(n * count, dtype=dtype)
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, mine)
        ok = torch.equal(out, torch.cat(x))
    elif kind == "reduce_scatter":
        full = [_inputs(torch, r, step, n * count, dtype) for r in range(n)]
        out = torch.empty(count, dtype=dtype)
        getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(out, full[rank].clone(), op=op)
        ok = torch.equal(out, reduced(full)[rank * count : (rank + 1) * count])
    elif kind == "all_to_all":
        full = [_inputs(torch, r, step, n * count, dtype) for r in range(n)]
        out = torch.empty(n * count, dtype=dtype)
        dist.all_to_all_single(out, full[rank].clone())
        want = torch.cat([full[r][rank * count : (rank + 1) * count] for r in range(n)])
        ok = torch.equal(out, want)
    elif kind == "gather":
        outs = [torch.empty(count, dtype=dtype) for _ in range(n)] if rank == root else None
        dist.gather(mine, gather_list=outs, dst=root)
        ok = rank != root or all(torch.equal(outs[r], x[r]) for r in range(n))
    elif kind == "scatter":
        out = torch.empty(count, dtype=dtype)
        dist.scatter(out, scatter_list=[t.clone() for t in x] if rank == root else None, src=root)
        ok = torch.equal(out, x[rank])
    elif kind == "barrier":
        dist.barrier()
        ok = True
    else:  # a ring of sends and receives
        out = torch.empty(count, dtype=dtype)
        if c["batched"]:
            ops = [dist.P2POp(dist.isend, mine, (rank + 1) % n), dist.P2POp(dist.irecv, out, (rank - 1) % n)]
            works = dist.batch_isend_irecv(ops)
        else:  # plain posted sends and receives progress together, whatever the link buffers
            works = [dist.isend(mine, (rank + 1) % n), dist.irecv(out, (rank - 1) % n)]
        for w in works:
            w.wait()
        ok = torch.equal(out, x[(rank - 1) % n])
    return None if ok else f"step {step} {kind} {c['dtype']} x{count} op {c['op']} root {root}: wrong result"


def _run_mismatch(torch, dist, pyscalecomm, c: dict, rank: int, n: int, which: str):
    """The fault step of a mismatch: a broadcast whose root the faulty rank
    names as itself, or a compressed allreduce with another codec parameter."""
    count = max(c["count"], 1)
    if which.endswith("root"):  # the faulty rank names a root the others do not
        root = c["root"] if which != "root" else rank if c["root"] != rank else (rank + 1) % n
        dist.broadcast(torch.full((count,), float(rank)), src=root)
    else:
        levels = 2 if which == "codec" else 8
        pyscalecomm.allreduce(torch.ones(max(count, 64)), f"qsgd:{levels}", key="soak")


def episode_rank(rank: int, n: int, seed: int, steps: int, fault: dict | None):
    """One rank's episode: (calls completed, wrong results, error text, seconds the failing call took)."""
    resumes = []  # timers that SIGCONT a stopped rank 0: fired before this rank exits (os._exit kills them)
    try:
        return _episode_calls(rank, n, seed, steps, fault, resumes)
    finally:
        for timer in resumes:
            timer.join()


def _episode_calls(rank: int, n: int, seed: int, steps: int, fault: dict | None, resumes: list):
    import signal
    import threading

    import torch
    import torch.distributed as dist

    import pyscalecomm

    store = dist.distributed_c10d._get_default_store()
    store.set(f"pid/{rank}", str(os.getpid()))
    wrong = []
    done = 0
    for c in plan(seed, n, steps):
        mismatch = None  # this rank's own version of the call (root or codec)
        if fault and fault["step"] == c["step"] and fault["kind"] in ("root", "codec"):
            mismatch = fault["kind"] if fault["rank"] == rank else "agreed-" + fault["kind"]
        elif fault and fault["rank"] == rank and fault["step"] == c["step"]:
            if fault["kind"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif fault["kind"] == "delay":
                time.sleep(fault["seconds"])
            elif fault["kind"] == "stop_store":  # the store's host (rank 0) stops for longer than the timeout
                pid = int(store.get("pid/0").decode())
                os.kill(pid, signal.SIGSTOP)
                resumes.append(threading.Timer(GROUP_TIMEOUT_S * 1.5, os.kill, (pid, signal.SIGCONT)))
                resumes[-1].start()
            elif fault["kind"] == "exit":  # the process exits with a thread inside a collective
                threading.Thread(target=_run_call, args=(torch, dist, c, rank, n), daemon=True).start()
                time.sleep(0.2)
                pyscalecomm._C._shutdown_all_at_exit()  # what the interpreter's exit runs
                return done, wrong, "exited here", 0.0
            else:  # abort: this rank leaves; the others must notice
                dist.group.WORLD._get_backend(torch.device("cpu")).abort()
                return done, wrong, "aborted here", 0.0
        start = time.monotonic()
        try:
            if mismatch:
                _run_mismatch(torch, dist, pyscalecomm, c, rank, n, mismatch)
                bad = None
            else:
                bad = _run_call(torch, dist, c, rank, n)
        except Exception as e:  # noqa: BLE001 - the error is the result
            return done, wrong, f"{type(e).__name__}: {str(e)[:400]}", time.monotonic() - start
        if bad:
            wrong.append(bad)
        done += 1
    return done, wrong, None, 0.0


def _shm_names() -> set[str]:
    return set(glob.glob("/dev/shm/scalecomm-*"))


def describe(seed: int, transports: list[str], max_ranks: int):
    """The episode's world, transport, algorithm, length, fault and a label; drawn from `seed`."""
    rnd = random.Random(seed)
    n = rnd.randint(3, max_ranks)
    transport = rnd.choice(transports)
    import pyscalecomm

    algos = [a for a in pyscalecomm.allreduce_algorithms(world_size=n) if a not in ("mpi", "nccl", "shared")]
    if transport == "shm":
        algos.append("shared")
    algo = rnd.choice(algos + ["auto", "auto"])
    steps = rnd.randint(20, 80)
    fault = None
    if rnd.random() < 0.5:
        kind = rnd.choice(FAULTS)
        fault = {"kind": kind, "rank": rnd.randrange(n), "step": rnd.randrange(steps - 5)}
        fault["seconds"] = round(rnd.uniform(0.2, 2), 2)
        if kind == "stop_store":
            fault["rank"] = rnd.randrange(1, n)  # another rank stops rank 0
    label = f"{n} ranks, {transport}, {algo}, {steps} steps, fault {fault}"
    return n, transport, algo, steps, fault, label


def run_episode(seed: int, transports: list[str], max_ranks: int) -> list[str]:
    """Runs one episode; returns the broken invariants (empty: fine)."""
    n, transport, algo, steps, fault, label = describe(seed, transports, max_ranks)
    label = f"seed {seed}: {label}"
    env = {"SCALECOMM_TRANSPORT": transport, "SCALECOMM_ALGO": algo, "SCALECOMM_SHM_RING_BYTES": RING_BYTES}
    env["PYTHONWARNINGS"] = "ignore::FutureWarning"
    if algo == "shared":  # a fixed algorithm must serve every size drawn (up to 2 MiB)
        env["SCALECOMM_SHM_WINDOW_BYTES"] = 1 << 21
    before = _shm_names()
    killed = (fault["rank"],) if fault and fault["kind"] == "kill" else ()
    mismatched = fault is not None and fault["kind"] in ("root", "codec")
    out = run_ranks(
        n,
        episode_rank,
        seed,
        steps,
        fault,
        env=env,
        group_timeout_s=GROUP_TIMEOUT_S,
        timeout_s=GROUP_TIMEOUT_S * 4 + steps,
        expect_errors=True,
        allow_missing=killed,
    )
    problems = []
    for r, res in enumerate(out):
        if r in killed:
            continue
        if res is None or isinstance(res, RankError):
            problems.append(f"rank {r} crashed or did not report: {res}")
            continue
        done, wrong, error, took = res
        problems += [f"rank {r}: {w}" for w in wrong]
        if mismatched and error is None:
            problems.append(f"rank {r} completed every call after the ranks disagreed on a {fault['kind']}")
        if error and error not in ("aborted here", "exited here"):
            if fault is None or fault["kind"] == "delay":
                problems.append(f"rank {r} failed without a fault that explains it: {error}")
            elif took > GROUP_TIMEOUT_S + GRACE_S:
                limit = GROUP_TIMEOUT_S + GRACE_S
                problems.append(f"rank {r} took {took:.1f}s to fail (limit {limit}s): {error}")
            elif "scalecomm" not in error:
                problems.append(f"rank {r} failed with an error that does not name scalecomm: {error}")
        if fault is None or fault["kind"] == "delay":
            if done != steps:
                problems.append(f"rank {r} completed {done} of {steps} calls")
    time.sleep(0.2)
    leaked = _shm_names() - before
    if leaked:
        problems.append(f"leaked shared memory: {sorted(leaked)}")
    return [f"{label}: {p}" for p in problems]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=3.0, help="stop starting episodes after this long")
    ap.add_argument("--episodes", type=int, default=0, help="at most this many episodes (0: until --minutes)")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000, help="first episode's seed")
    ap.add_argument("--ranks", type=int, default=4, help="largest world (3..this)")
    ap.add_argument("--transports", default="shm,tcp")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    transports = args.transports.split(",")
    end = time.monotonic() + args.minutes * 60
    episodes, failures = 0, []
    by_fault: dict[str, int] = {}
    seed = args.seed
    while time.monotonic() < end and (args.episodes == 0 or episodes < args.episodes):
        problems = run_episode(seed, transports, args.ranks)
        episodes += 1
        status = "ok" if not problems else "FAILED"
        what = describe(seed, transports, args.ranks)[-1]
        fault = describe(seed, transports, args.ranks)[4]
        kind = fault["kind"] if fault else "none"
        by_fault[kind] = by_fault.get(kind, 0) + 1
        print(f"episode {episodes} (seed {seed}): {status}  [{what}]", flush=True)
        for p in problems:
            print("  " + p, flush=True)
        failures += problems
        seed += 1
    counts = ", ".join(f"{k} {by_fault.get(k, 0)}" for k in ["none", *FAULTS])
    print(
        f"{episodes} episodes from seed {args.seed} (by fault: {counts}): {len(failures)} broken invariants"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
