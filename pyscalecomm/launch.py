"""Process launch helpers shared by the benchmark and the examples.

- :func:`env_from_launcher` fills RANK / WORLD_SIZE / LOCAL_RANK from what
  torchrun, mpirun (Open MPI, MPICH/PMI) or Slurm's srun set, so the same
  script runs under all of them (MASTER_ADDR defaults to 127.0.0.1 and
  MASTER_PORT to 29500 when a launcher other than torchrun gives none).
- :func:`spawn_self` re-runs ``python -m <module> <args>`` as N local ranks,
  for single-machine runs without any launcher; it returns the worst exit code.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

_RANK_VARS = [
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
]


def env_from_launcher() -> bool:
    """Sets RANK/WORLD_SIZE/LOCAL_RANK from the launcher's variables; False if none found."""
    for rank_var, size_var, local_var in _RANK_VARS:
        if rank_var in os.environ and size_var in os.environ:
            os.environ.setdefault("RANK", os.environ[rank_var])
            os.environ.setdefault("WORLD_SIZE", os.environ[size_var])
            os.environ.setdefault("LOCAL_RANK", os.environ.get(local_var, "0"))
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
            return True
    return False


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
    if not env_from_launcher():
        raise SystemExit("no launcher found: use --nproc N, torchrun, mpirun or srun")
    run(args)
    return 0


def spawn_self(module: str, nproc: int, args: list[str], extra_env: dict | None = None) -> int:
    """Runs ``python -m module args`` as ranks 0..nproc-1 on this host; returns the worst exit code."""
    port = str(_free_port())
    procs = []
    for rank in range(nproc):
        env = dict(os.environ)
        env.update(extra_env or {})
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(nproc),
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        )
        procs.append(subprocess.Popen([sys.executable, "-m", module, *args], env=env))
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)
