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

import torch  # (loads libc10 and libtorch before our extension)
import torch.distributed  # noqa: F401

from pyscalecomm._cli import VERSION as __version__  # noqa: E402


def _built_for() -> str:
    try:
        from pyscalecomm._build_info import TORCH_VERSION
    except ImportError:
        return "unknown"
    return TORCH_VERSION


def _check_torch(built: str, running: str) -> None:
    """The extension is C++ against one torch's headers: another torch
    release (the part before '+') cannot load it safely."""
    if built != "unknown" and built.split("+")[0] != running.split("+")[0]:
        raise ImportError(
            f"pyscalecomm was built for torch {built}, but this is torch {running}. Rebuild it against this "
            f"torch: pip install --no-build-isolation -e . (in the scalecomm checkout), or reinstall "
            f"the wheel built for it"
        )


_check_torch(_built_for(), torch.__version__)
try:
    from pyscalecomm import _C
except ImportError as e:
    raise ImportError(
        f"pyscalecomm's extension does not load ({e}) with torch {torch.__version__} (built for torch "
        f"{_built_for()}). Build it: pip install --no-build-isolation -e . (in the scalecomm checkout)"
    ) from e
from pyscalecomm._options import Options  # noqa: E402
from pyscalecomm._registration import BACKEND_NAME, register  # noqa: E402

register()

if os.environ.get("SCALECOMM_LAUNCHER_ENV", "1") != "0":
    from pyscalecomm.launch import env_from_launcher

    env_from_launcher()


from pyscalecomm import compress, hooks  # noqa: E402  (pyscalecomm.hooks.compressed, ...)
from pyscalecomm.direct import allreduce  # noqa: E402  (any array: torch, NumPy, CuPy)


def params() -> list[dict]:
    """Every declared setting, group settings first, as a dict: ``name`` (the
    ``SCALECOMM_*`` variable), ``option`` (its ``Options`` field; empty for a
    process-wide setting), ``type`` (``"int"`` or ``"str"``), ``default``
    (text), ``lo``/``hi`` (int range; ``hi`` may be ``"world"``), ``choices``
    (``"a|b"`` or empty for any text) and ``doc``."""
    return list(_C.params())


def params_markdown() -> str:
    """The settings table of docs/configuration.md, generated from ``params()``."""
    rows = ["| variable | `Options` field | default | valid | meaning |", "| --- | --- | --- | --- | --- |"]
    for p in params():
        option = p["option"]
        field = f"`{option[:-3]}`" if option.endswith("_ms") else (f"`{option}`" if option else "(process)")
        if p["type"] == "int":
            valid = f"{p['lo']} .. {p['hi']}" if p["hi"] is not None else f">= {p['lo']}"
        else:
            valid = ", ".join(p["choices"].split("|")) if p["choices"] else "text"
        default = f"`{p['default']}`" if p["default"] else "(empty)"
        rows.append(f"| `{p['name']}` | {field} | {default} | {valid} | {p['doc']} |")
    return "\n".join(rows) + "\n"


def algorithms(collective: str) -> list[str]:
    """scalecomm's own algorithms that can be named for ``collective``
    (allreduce, broadcast, reduce, allgather, reduce_scatter, barrier) in
    ``Options(algorithm=...)`` or ``SCALECOMM_ALGO``: every one of this
    build's, whatever the group (see ``allreduce_algorithms`` for those that
    serve a given group; ``accepted_algorithms`` adds ``auto`` and the native
    ``nccl`` and ``mpi``)."""
    names = list(_C.algorithms(collective))
    if not names:
        raise ValueError(
            f"unknown collective {collective!r}; choose allreduce, broadcast, reduce, allgather, "
            "reduce_scatter or barrier"
        )
    return names


def accepted_algorithms(collective: str) -> list[str]:
    """Every name ``Options(algorithm=...)`` and ``SCALECOMM_ALGO`` take for
    ``collective``: ``auto``, scalecomm's own algorithms and the native ones
    (``nccl``: NCCL's own collective on CUDA tensors; ``mpi``: MPI's under
    mpirun)."""
    names = list(_C.accepted_algorithms(collective))
    if not names:
        algorithms(collective)  # raises the unknown-collective error
    return names


def algorithm_table() -> list[dict]:
    """Every algorithm of this build, one entry each, in registry order: its
    ``name``, ``kind`` (schedule, windows, native or auto), ``memory`` (any,
    host or device), the ``collectives`` it can be named for, a ``summary``,
    and for allreduce its limits (``max_world``, ``max_bytes``: 0 is none)
    and whether ``auto`` prices it."""
    return list(_C.algorithm_registry())


def algorithms_markdown() -> str:
    """The algorithm table of docs/algorithms.md, generated from ``algorithm_table()``."""
    rows = ["| name | kind | memory | collectives | what it does |", "| --- | --- | --- | --- | --- |"]
    for a in algorithm_table():
        collectives = ", ".join(a["collectives"])
        rows.append(f"| `{a['name']}` | {a['kind']} | {a['memory']} | {collectives} | {a['summary']} |")
    return "\n".join(rows) + "\n"


def codec_table() -> list[dict]:
    """Every compression codec of this build, one entry each: its ``name``,
    the ``arg`` its spec takes (``ratio``, ``levels``, ``rank`` or none:
    ``topk:0.01``, ``qsgd:8``, ``powersgd:4``, ``sign``), whether it is
    ``biased`` (error feedback on by default), its communication ``rounds``
    per call, whether its payloads are ``summable`` (allreduced rather than
    allgathered), whether it is ``shaped`` (factors each weight in its own
    matrix shape, so a DDP hook passes its bucket's weight shapes), and a
    ``summary``."""
    return list(_C.codec_registry())


def allreduce_algorithms(
    world_size: int | None = None, nbytes: int | None = None, window_bytes: int = 0
) -> list[str]:
    """Allreduce algorithms this build implements (``mpi`` passthrough not
    included), in registry order. With ``world_size`` (and ``nbytes``): only
    those that serve a group of that size (and a message of that many bytes);
    ``pairwise``, for one, serves 2 ranks and up to 4032 bytes, and ``shared``
    only ranks on one host whose shared windows (``window_bytes``, see
    SCALECOMM_SHM_WINDOW_BYTES) hold the message."""
    return list(_C.allreduce_algorithms(world_size or 0, -1 if nbytes is None else nbytes, window_bytes))


def built_with_mpi() -> bool:
    """Whether this build has the MPI transport and the ``mpi`` algorithm."""
    return bool(_C.built_with_mpi)


def stats(group=None, device: str = "cpu") -> list[dict]:
    """What ``group``'s (default: the default group's) scalecomm backend has
    run so far, per operation and size bucket: ``operation``
    ("allreduce:ring"), ``bucket_bytes`` (calls of up to that many bytes),
    ``calls``, ``bytes``, ``seconds``, ``busbw_GBps``. ``SCALECOMM_SUMMARY=1``
    logs the same table when the group is destroyed."""
    import torch
    import torch.distributed as dist

    pg = group if group is not None else dist.group.WORLD
    be = pg._get_backend(torch.device(device))
    if not hasattr(be, "bucket_stats"):
        raise ValueError(
            f"pyscalecomm.stats: this group's {device} backend is {type(be).__name__}, not scalecomm"
        )
    return be.bucket_stats()


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
    "algorithms",
    "allreduce",
    "allreduce_algorithms",
    "built_with_cuda",
    "built_with_mpi",
    "built_with_nccl",
    "compress",
    "hooks",
    "params",
    "params_markdown",
    "algorithms_markdown",
    "algorithm_table",
    "accepted_algorithms",
    "codec_table",
    "stats",
]
