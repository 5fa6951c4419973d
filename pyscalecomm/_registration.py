"""Registration of the scalecomm backend with torch.distributed."""

from __future__ import annotations

import atexit
import logging

import torch.distributed as dist

from pyscalecomm import _C
from pyscalecomm._options import Options, _to_ms

BACKEND_NAME = "scalecomm"
_log = logging.getLogger("pyscalecomm")


def backend_config(timeout, pg_options, group_name: str):
    """A group's ``_C.BackendConfig``: the declared defaults, then `timeout`
    (a timedelta or None), then the ``SCALECOMM_*`` variables, then the
    fields set in `pg_options` (a ``pyscalecomm.Options``; anything else is
    another backend's and ignored)."""
    config = _C.BackendConfig()  # declared defaults
    if timeout is not None:
        config.timeout_ms = _to_ms(timeout)
    config.load_environment()  # SCALECOMM_* variables override init_process_group's values
    if isinstance(pg_options, Options):
        pg_options.apply_to(config)
    elif pg_options is not None:
        # With device routing ("cpu:scalecomm,cuda:nccl") torch hands the same
        # pg_options to every backend; options meant for another backend are not ours.
        _log.info("scalecomm: ignoring pg_options of type %s (not pyscalecomm.Options)", type(pg_options))
    config.group_name = group_name
    return config


def _create_backend(dist_opts, pg_options):
    """Creator called by torch.distributed for every group that uses scalecomm."""
    config = backend_config(dist_opts.timeout, pg_options, str(dist_opts.group_id))
    return _C.ScalecommBackend(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, config)


_registered = False


def register() -> None:
    """Registers "scalecomm" once per process (idempotent). The name may
    already be registered by the ``torch.backends`` entry point
    (pyscalecomm_autoload), whose creator ends in `_create_backend` too."""
    global _registered
    if _registered:
        return
    _registered = True
    # Groups still alive at exit are shut down while Python can free what their
    # worker threads hold (a worker dropping a tensor during interpreter
    # finalisation would abort the process).
    atexit.register(_C._shutdown_all_at_exit)
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    # Builds without CUDA refuse CUDA tensors with a clear error; registering
    # "cuda" there too keeps init_process_group("scalecomm") identical everywhere.
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"])
