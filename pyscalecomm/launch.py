"""Process launch helpers shared by the CLIs and by ``import pyscalecomm``.

- :func:`env_from_launcher` fills RANK / WORLD_SIZE / LOCAL_RANK and
  MASTER_ADDR / MASTER_PORT from what mpirun/mpiexec (Open MPI, MPICH/PMI,
  PMIx) or Slurm's srun provide, so ``dist.init_process_group("scalecomm")``
  needs no variables under them. torchrun's variables are never overridden.
  Under MPI, rank 0's host and a free port reach every rank through mpi4py
  (all ranks on one host: 127.0.0.1); without mpi4py, single-host jobs derive
  the port from the job id and multi-host jobs must set MASTER_ADDR. Under
  Slurm, MASTER_ADDR is the first host of the job's node list and the port is
  derived from the job id.
- :func:`rank_env` is one rank's environment as torchrun gives it; every
  launcher this package starts builds its ranks with it: :func:`run_local`
  (N ranks of a command on this host), :func:`spawn_self` (``python -m
  <module> <args>`` as N local ranks, for the CLIs' ``--nproc``) and the
  emulated cluster. Under torchrun, mpirun and srun, :func:`env_from_launcher`
  fills the same variables in the rank itself.
- :func:`local_gpu` makes this rank's GPU current: LOCAL_RANK modulo the GPUs
  visible, so more ranks than GPUs share them. NCCL joins ranks that share a
  GPU only as ranks of different hosts: :func:`share_gpu_env` gives each such
  rank its own NCCL_HOSTID, so NCCL (ProcessGroupNCCL and scalecomm's NCCL
  channel alike) connects them through its socket transport.
- :func:`wait_ranks` waits for the processes of one job within a deadline:
  when one fails the others get 10 s to report, then every straggler is killed.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

# (rank, size, local rank, local size) as each MPI launcher exports them: Open
# MPI's mpirun/prterun, and MPICH/Intel MPI's Hydra. (PMIx exports PMIX_RANK
# but no size variable: a PMIx-only launch is found through Slurm's variables.)
_MPI_VARS = [
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
]


def detect_launcher() -> str | None:
    """ "torchrun" (RANK already set), "mpi", "slurm", or None."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return "torchrun"
    if any(r in os.environ and n in os.environ for r, n, _, _ in _MPI_VARS):
        return "mpi"
    if "SLURM_PROCID" in os.environ and "SLURM_NTASKS" in os.environ:
        return "slurm"
    return None


def _job_port(job_id: str) -> int:
    """A port in [20000, 40000) that every rank of one job derives alike."""
    digits = re.sub(r"\D", "", job_id) or "0"
    return 20000 + int(digits) % 20000


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm node list such as "gpu[07-09,12],cpu1" (-> "gpu07")."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise ValueError(f"cannot read the Slurm node list {nodelist!r}")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _mpi_rendezvous(size: int, local_size: int, job_id: str) -> tuple[str, int]:
    try:
        from mpi4py import MPI
    except ImportError:
        if local_size == size:
            return "127.0.0.1", _job_port(job_id)
        raise RuntimeError(
            "scalecomm: ranks started by mpirun on several hosts need mpi4py (pip install mpi4py) "
            "to find rank 0, or MASTER_ADDR and MASTER_PORT set for every rank"
        ) from None
    comm = MPI.COMM_WORLD
    hosts = comm.allgather(socket.gethostname())
    answer = None
    if comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        answer = ("127.0.0.1" if len(set(hosts)) == 1 else hosts[0], port)
    return comm.bcast(answer, root=0)


def env_from_launcher() -> str | None:
    """Fills the rendezvous variables from the launcher's; returns the launcher or None.

    Variables already set are kept, so MASTER_ADDR/MASTER_PORT given by the
    user win over what is derived here.
    """
    launcher = detect_launcher()
    env = os.environ
    if launcher == "mpi":
        rank_var, size_var, local_var, local_size_var = next(
            v for v in _MPI_VARS if v[0] in env and v[1] in env
        )
        env.setdefault("RANK", env[rank_var])
        env.setdefault("WORLD_SIZE", env[size_var])
        env.setdefault("LOCAL_RANK", env.get(local_var, "0"))
        env.setdefault("LOCAL_WORLD_SIZE", env.get(local_size_var, env[size_var]))
        if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
            job = (
                env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE") or env.get("PMI_KVSNAME", "0")
            )
            addr, port = _mpi_rendezvous(int(env["WORLD_SIZE"]), int(env["LOCAL_WORLD_SIZE"]), job)
            env.setdefault("MASTER_ADDR", addr)
            env.setdefault("MASTER_PORT", str(port))
    elif launcher == "slurm":
        env.setdefault("RANK", env["SLURM_PROCID"])
        env.setdefault("WORLD_SIZE", env["SLURM_NTASKS"])
        env.setdefault("LOCAL_RANK", env.get("SLURM_LOCALID", "0"))
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
        env.setdefault("MASTER_ADDR", first_slurm_host(nodelist))
        env.setdefault(
            "MASTER_PORT", str(_job_port(env.get("SLURM_JOB_ID", "0") + env.get("SLURM_STEP_ID", "")))
        )
    return launcher


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main_with_launcher(module: str, args, argv, run) -> int:
    """Entry point shared by the CLIs: ``--nproc N`` spawns N local ranks of
    ``python -m module`` (without --nproc); otherwise reads the launcher's
    environment and calls ``run(args)`` in this process."""
    if getattr(args, "nproc", 0) and "RANK" not in os.environ:
        rest = list(sys.argv[1:] if argv is None else argv)
        for i, a in enumerate(rest):
            if a == "--nproc":
                del rest[i : i + 2]
                break
            if a.startswith("--nproc="):
                del rest[i]
                break
        return spawn_self(module, args.nproc, rest)
    if env_from_launcher() is None:
        raise SystemExit("no launcher found: use --nproc N, torchrun, mpirun or srun")
    return run(args) or 0


def rank_env(
    rank: int,
    world: int,
    master_addr: str,
    master_port: int | str,
    *,
    local_world: int | None = None,
    base: dict | None = None,
) -> dict[str, str]:
    """The environment of rank ``rank`` of ``world``: ``base`` (default this
    process's) with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE: ``local_world`` ranks per host, default all on one,
    MASTER_ADDR, MASTER_PORT) and one intra-op thread unless ``base`` sets
    OMP_NUM_THREADS (ranks sharing a host would otherwise oversubscribe it)."""
    local_world = local_world or world
    env = dict(os.environ if base is None else base)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank % local_world),
        LOCAL_WORLD_SIZE=str(local_world),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_local(
    command: list[str], world: int, timeout: float | None, what: str, extra_env: dict | None = None
) -> int:
    """Runs ``command`` as ranks 0..world-1 on this host (a fresh rendezvous
    port); returns the worst exit status (see :func:`wait_ranks`)."""
    port = _free_port()
    base = {**os.environ, **(extra_env or {})}
    procs = []
    try:
        for rank in range(world):
            procs.append(subprocess.Popen(command, env=rank_env(rank, world, "127.0.0.1", port, base=base)))
    except BaseException:
        for p in procs:  # a failed start leaves none behind
            p.kill()
            p.wait(timeout=10)
        raise
    return wait_ranks(procs, timeout, what)


def spawn_self(module: str, nproc: int, args: list[str], extra_env: dict | None = None) -> int:
    """Runs ``python -m module args`` as ranks 0..nproc-1 on this host; returns the worst exit code."""
    return run_local([sys.executable, "-m", module, *args], nproc, None, module, extra_env)


def share_gpu_env(local_rank: int, environ=None) -> None:
    """Lets NCCL join ranks of one host that share a GPU: each gets its own
    NCCL_HOSTID (NCCL refuses two ranks of one host on one GPU, and treats
    ranks of distinct host ids as separate hosts, joined through its socket
    transport), and NCCL_SOCKET_IFNAME defaults to loopback. Variables the
    caller set (an emulated cluster's per-host ids and interface) are kept.
    NCCL reads both when its first communicator is made."""
    env = os.environ if environ is None else environ
    env.setdefault("NCCL_HOSTID", f"{socket.gethostname()}-rank{local_rank}")
    env.setdefault("NCCL_SOCKET_IFNAME", "lo")


def local_gpu():
    """This rank's CUDA device (LOCAL_RANK modulo the GPUs visible), made
    current; where this host's ranks outnumber its GPUs, :func:`share_gpu_env`."""
    import torch

    gpus = torch.cuda.device_count()
    if gpus == 0:
        raise RuntimeError("--device cuda: torch sees no CUDA GPU here; use --device cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) > gpus:
        share_gpu_env(local_rank)
    device = torch.device("cuda", local_rank % gpus)
    torch.cuda.set_device(device)
    return device


def wait_ranks(procs: list, timeout: float | None, what: str) -> int:
    """Waits for every process; returns the worst exit status (124: past `timeout` seconds).

    A failing rank leaves the others 10 s to report before they are killed, so
    a dead peer never leaves the job hanging; nothing outlives this call."""
    deadline = None if timeout is None else time.monotonic() + timeout
    codes = [None] * len(procs)
    try:
        while any(c is None for c in codes):
            if deadline is not None and time.monotonic() > deadline:
                print(f"{what}: ran past its {timeout:g} s limit; stopping every rank", file=sys.stderr)
                break
            codes = [p.poll() for p in procs]
            if any(c not in (None, 0) for c in codes):
                end = time.monotonic() + 10
                while any(c is None for c in codes) and time.monotonic() < end:
                    codes = [p.poll() for p in procs]
                    time.sleep(0.1)
                break
            time.sleep(0.05)
        return max((c if c is not None else 124 for c in codes), key=abs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
