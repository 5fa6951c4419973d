"""Run a function on N ranks (spawned processes) with a scalecomm default group.

run_ranks(n, fn, *args, env=..., timeout_s=...) spawns n processes; each sets
``env``, imports pyscalecomm, joins ``init_process_group("scalecomm")`` through
a fresh TCPStore, calls ``fn(rank, n, *args)`` and sends back its return value
or its exception text. An ``env`` value that is a list gives each rank its own
(``env={"SCALECOMM_HOSTNAME": ["a", "a", "b", "b"]}``). The parent returns the list of results in rank order
and raises if any rank failed (unless ``expect_errors``), or if a rank does not
finish in time (then every rank is killed: tests never hang).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import subprocess
import sys
import traceback
from datetime import timedelta
from multiprocessing import reduction


def group_error(rank, n, options):
    """The ValueError text of making a scalecomm group with these Options
    fields (a dict), or "no error". For run_ranks."""
    import torch.distributed as dist

    import pyscalecomm

    try:
        dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(**options))
    except ValueError as e:
        return str(e)
    return "no error"


def rank_gpu(rank: int, nccl: bool = True) -> int:
    """This rank's GPU index (made current) for a two-rank job: its own where there are two
    GPUs, else GPU 0, with `nccl` a per-rank NCCL_HOSTID (pyscalecomm.launch.share_gpu_env):
    NCCL then joins the ranks through its socket transport over loopback."""
    import torch

    from pyscalecomm.launch import share_gpu_env

    shared = torch.cuda.device_count() < 2
    if shared and nccl:
        share_gpu_env(rank)
    gpu = 0 if shared else rank
    torch.cuda.set_device(gpu)
    return gpu


def mpirun(n: int, argv: list[str], env: dict | None = None, timeout: float = 180) -> str:
    """Runs ``python argv...`` on n ranks under mpirun (no rendezvous variables
    of this process, one intra-op thread per rank); asserts it exited 0 and
    that every rank printed ``OK rank``; returns its output."""
    launch_vars = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    clean = {k: v for k, v in os.environ.items() if k not in launch_vars}
    clean.update({k: str(v) for k, v in (env or {}).items()})
    clean.setdefault("OMP_NUM_THREADS", "1")
    cmd = ["mpirun", "-n", str(n), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [sys.executable, *argv]
    p = subprocess.run(cmd, env=clean, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert out.count("OK rank") == n, out[-4000:]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankError:
    def __init__(self, kind: str, text: str):
        self.kind = kind
        self.text = text

    def __repr__(self) -> str:
        return f"RankError({self.kind}: {self.text})"


# Ranks start from a fork server that has imported these once, not each from
# a fresh interpreter: importing torch takes 3-4 s of CPU here, paid by every
# rank of every test otherwise. pyscalecomm itself is imported by each rank,
# after its environment is set (the extension reads settings when it loads).
_PRELOAD = ["torch", "torch.distributed", "numpy"]


def _context():
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _detach(dup):
    return dup.detach()


class _ParentFd:
    """The parent's file descriptor `fd` as it is at the rank's start, handed
    to the rank by the fork server (pytest's capture redirects fds 1 and 2)."""

    def __init__(self, fd):
        self.fd = fd

    def __reduce__(self):  # runs while the fork server's request is pickled
        return (_detach, (reduction.DupFd(self.fd),))


def _child(rank, n, port, fn, args, env, init, group_timeout_s, queue, parent=None):
    if parent is not None:
        # As a spawned child: the parent's environment and stdout/stderr as they
        # are now, not the fork server's from when it started.
        parent_env, fds = parent
        os.environ.clear()
        os.environ.update(parent_env)
        for target, fd in zip((1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
    for k, v in (env or {}).items():  # a list gives each rank its value; None unsets
        v = v[rank] if isinstance(v, list) else v
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = str(v)
    try:
        import torch
        import torch.distributed as dist

        import pyscalecomm  # noqa: F401  (registers the backend)

        # torch read TORCH_DISTRIBUTED_DEBUG when the fork server imported it
        dist.set_debug_level_from_env()

        # One intra-op thread per rank, as launchers set it (OMP_NUM_THREADS=1):
        # ranks x default threads oversubscribe this machine's cores.
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

        if init:
            dist.init_process_group(
                backend=init,
                init_method=f"tcp://127.0.0.1:{port}",
                rank=rank,
                world_size=n,
                timeout=timedelta(seconds=group_timeout_s),
            )
        out = fn(rank, n, *args)
        queue.put((rank, "ok", out))
        if init and dist.is_initialized():
            dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        queue.put((rank, "error", RankError(type(e).__name__, f"{e}\n{traceback.format_exc()}")))
    finally:
        queue.close()
        queue.join_thread()  # flush the result before the hard exit
        os._exit(0)


def run_ranks(
    n,
    fn,
    *args,
    env=None,
    init="scalecomm",
    timeout_s=120,
    group_timeout_s=60,
    expect_errors=False,
    allow_missing=(),
):
    ctx = _context()
    queue = ctx.Queue()
    port = free_port()
    parent = (dict(os.environ), (_ParentFd(1), _ParentFd(2)))
    procs = [
        ctx.Process(target=_child, args=(r, n, port, fn, args, env, init, group_timeout_s, queue, parent))
        for r in range(n)
    ]
    for p in procs:
        p.start()
    results = {}
    import queue as qmod
    import time

    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < n - len(allow_missing):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"ranks {sorted(set(range(n)) - set(results))} did not finish in {timeout_s}s"
                )
            try:
                rank, status, out = queue.get(timeout=min(left, 1.0))
            except qmod.Empty:
                dead = [
                    r
                    for r, p in enumerate(procs)
                    if r not in results and r not in allow_missing and p.exitcode is not None
                ]
                if dead:
                    try:  # a result may still be in the pipe
                        rank, status, out = queue.get(timeout=2.0)
                        results[rank] = out
                        continue
                    except qmod.Empty:
                        pass
                    for r in dead:
                        results[r] = RankError(
                            "Died",
                            f"rank {r} exited with code {procs[r].exitcode} without reporting a result",
                        )
                continue
            results[rank] = out if status == "ok" else out
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    ordered = [results.get(r) for r in range(n)]
    if not expect_errors:
        errors = [(r, x) for r, x in enumerate(ordered) if isinstance(x, RankError)]
        if errors:
            raise AssertionError("\n".join(f"rank {r}: {e.kind}: {e.text}" for r, e in errors))
    return ordered


def ranks_log(n: int, module: str, fn: str, env: dict, timeout: float = 120) -> list[str]:
    """The lines the ranks wrote to stderr when run_ranks(n, fn, env=env)
    ran in a fresh Python (the ranks' log, SCALECOMM_DEBUG); `fn` is named
    by its test module (under tests/) and name. Asserts it exited 0."""
    code = "import sys; sys.path.insert(0, 'tests'); from dist_helpers import run_ranks; "
    code += f"from {module} import {fn}; run_ranks({n}, {fn}, env={env!r})"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stderr.splitlines()
