"""Makes ``dist.init_process_group("scalecomm")`` work without ``import pyscalecomm``.

torch calls :func:`register` (the ``torch.backends`` entry point this package
installs) near the end of ``import torch``, after torch.distributed has
loaded; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off. It only names the
backend: pyscalecomm and its extension load when the first scalecomm group is
created, so ``import torch`` stays as fast as it was for everyone else. It
lives outside the package because importing ``pyscalecomm.<anything>`` would
import pyscalecomm (and its extension) in the middle of torch's own import.

It also lets ranks started by mpirun or srun rendezvous with no variables of
their own: torch's ``env://`` rendezvous (init_process_group's default) is
wrapped so that, when RANK or WORLD_SIZE is missing and an MPI launcher or
srun started the process, ``import pyscalecomm`` first fills RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the launcher's variables
(``pyscalecomm.launch.env_from_launcher``). Where torch would rendezvous
anyway (torchrun, variables set by hand) nothing changes, and
``SCALECOMM_LAUNCHER_ENV=0`` turns it off.
"""

import os

# What mpirun (Open MPI, MPICH/Hydra) and srun export: a process they started.
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


def _create(dist_opts, pg_options):
    import pyscalecomm  # noqa: F401  (the real registration: exit handler, launcher variables)
    from pyscalecomm._registration import _create_backend

    return _create_backend(dist_opts, pg_options)


def _started_by_launcher_without_rank() -> bool:
    env = os.environ
    if env.get("SCALECOMM_LAUNCHER_ENV", "1") == "0":
        return False
    return ("RANK" not in env or "WORLD_SIZE" not in env) and any(v in env for v in _LAUNCHER_VARS)


def _wrap_env_rendezvous() -> None:
    """init_process_group's env:// rendezvous, first filling the launcher's
    variables where torch would otherwise refuse for want of RANK."""
    import importlib

    # (torch.distributed.rendezvous is also the name of a function torch.distributed exports)
    rdzv = importlib.import_module("torch.distributed.rendezvous")

    original = rdzv._rendezvous_handlers.get("env")
    if original is None or getattr(original, "_scalecomm_launcher", False):
        return

    def env_from_launcher_then_torch(url, *args, **kwargs):
        if _started_by_launcher_without_rank():
            import pyscalecomm  # noqa: F401  (its import reads the launcher's variables)
        return original(url, *args, **kwargs)

    env_from_launcher_then_torch._scalecomm_launcher = True
    rdzv._rendezvous_handlers["env"] = env_from_launcher_then_torch


def register() -> None:
    """Registers "scalecomm" with torch.distributed; never raises (a failure
    here would fail ``import torch`` itself)."""
    try:
        import torch.distributed as dist

        if not dist.is_available() or "SCALECOMM" in dist.Backend._plugins:
            return
        dist.Backend.register_backend("scalecomm", _create, extended_api=True, devices=["cpu", "cuda"])
        _wrap_env_rendezvous()
    except Exception:  # noqa: BLE001 - without the backend, `import pyscalecomm` still registers it
        return
