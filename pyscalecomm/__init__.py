"""scalecomm: collective communication for PyTorch.

``import pyscalecomm`` registers the ``"scalecomm"`` backend with
``torch.distributed``; afterwards ``dist.init_process_group("scalecomm")`` (or
``"cpu:scalecomm"``) runs collectives with scalecomm's own algorithms over
shared memory (same host) and TCP (across hosts).

Per-group settings: pass ``pyscalecomm.Options(...)`` as ``pg_options``, or set
the ``SCALECOMM_*`` environment variables listed by :func:`params`.

Under mpirun/mpiexec or srun (and not torchrun), the import also fills RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT from the launcher (see
``pyscalecomm.launch``), so ``init_process_group("scalecomm")`` needs no
variables there; SCALECOMM_LAUNCHER_ENV=0 turns that off.
"""

import os

import torch  # noqa: F401  (loads libc10 and libtorch before our extension)
import torch.distributed  # noqa: F401

from pyscalecomm import _C
from pyscalecomm._options import Options
from pyscalecomm._registration import BACKEND_NAME, register

__version__ = "0.1.0"

register()

if os.environ.get("SCALECOMM_LAUNCHER_ENV", "1") != "0":
    from pyscalecomm.launch import env_from_launcher

    env_from_launcher()


from pyscalecomm import compress, hooks  # noqa: E402  (pyscalecomm.hooks.compressed, ...)


def params() -> list[tuple[str, str, str]]:
    """Every ``SCALECOMM_*`` environment variable as ``(name, default, doc)``."""
    return list(_C.params())


def allreduce_algorithms(world_size: int | None = None, nbytes: int | None = None) -> list[str]:
    """Allreduce algorithms this build implements (schedules run by scalecomm; ``mpi``
    passthrough not included), in registry order. With ``world_size`` (and
    ``nbytes``): only those that serve a group of that size (and a message of
    that many bytes); ``pairwise``, for one, serves 2 ranks and up to 4032 bytes."""
    return list(_C.allreduce_algorithms(world_size or 0, -1 if nbytes is None else nbytes))


def built_with_mpi() -> bool:
    """Whether this build has the MPI transport and the ``mpi`` algorithm."""
    return bool(_C.built_with_mpi)


def allreduce(tensor, compression: str, **kwargs):
    """Compressed allreduce (see pyscalecomm.compress.allreduce)."""
    from pyscalecomm.compress import allreduce as _allreduce

    return _allreduce(tensor, compression, **kwargs)


def built_with_cuda() -> bool:
    """Whether this build takes CUDA tensors (kernels, host staging)."""
    return bool(_C.built_with_cuda)


def built_with_nccl() -> bool:
    """Whether this build has the NCCL transport and the ``nccl`` algorithm."""
    return bool(_C.built_with_nccl)


__all__ = [
    "BACKEND_NAME",
    "Options",
    "__version__",
    "allreduce",
    "allreduce_algorithms",
    "built_with_cuda",
    "built_with_mpi",
    "built_with_nccl",
    "compress",
    "hooks",
    "params",
]
