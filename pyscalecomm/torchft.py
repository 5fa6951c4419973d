"""scalecomm as torchft's reconfigurable process group.

torchft (PyTorch's per-step fault tolerance) re-creates the process group of
its replica dimension at every quorum change. ``ProcessGroupScalecomm`` goes
wherever torchft takes its ``ProcessGroupGloo``::

    from torchft import Manager
    from pyscalecomm.torchft import ProcessGroupScalecomm

    manager = Manager(pg=ProcessGroupScalecomm(timeout=timedelta(seconds=10)), ...)

Each ``configure(store_addr, replica_id, rank, world_size, ...)`` aborts the
group it had (every call waiting on it fails at once) and builds a fresh
scalecomm group under the store prefix torchft hands it; ``abort()`` works
from any thread, ``errored()`` says why a group failed (a peer died, a call
timed out, it was aborted), ``set_timeout()`` applies to the live group's
next calls too, and ``shutdown()`` closes the group, telling its peers it
left. CPU tensors always; CUDA tensors when the build has CUDA.

torchft is an optional dependency (``pip install .[torchft]``); importing
``pyscalecomm`` never imports it, this module does.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup

try:
    from torchft.process_group import ProcessGroupWrapper
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "pyscalecomm.torchft needs torchft: pip install torchft "
        "(or pip install .[torchft] from scalecomm's checkout)"
    ) from e

from pyscalecomm import _C
from pyscalecomm._registration import backend_config

__all__ = ["ProcessGroupScalecomm"]

T = TypeVar("T")

# c10d's per-call timeout when the caller sets none (kUnsetTimeout).
_UNSET = timedelta(milliseconds=-1)


class ProcessGroupScalecomm(ProcessGroupWrapper):
    """A reconfigurable scalecomm process group for torchft.

    Args:
        timeout: the store rendezvous's and every call's timeout (a call
            that passes its own keeps it); ``set_timeout`` changes it.
        options: a ``pyscalecomm.Options`` for every group this object
            creates (algorithm, transport, compression, ...); ``None``: the
            ``SCALECOMM_*`` variables and the defaults.
    """

    def __init__(self, timeout: timedelta = timedelta(seconds=60), options=None) -> None:
        super().__init__(timeout=timeout)
        self._options = options
        self._backend = None  # the live group's _C.ScalecommBackend

    def _create_pg(self, store, rank: int, world_size: int) -> BaseProcessGroup:
        # The name keys the rendezvous (under torchft's store prefix) and
        # labels logs and flight records: the same on every member of this
        # group (the quorum and the rank within a replica group), one per quorum.
        name = "torchft"
        if self._quorum_id is not None:
            name += f"_quorum_{self._quorum_id}"
        if self._group_rank is not None and self._group_world_size:
            name += f"_rank_{self._group_rank % self._group_world_size}"
        config = backend_config(self._timeout, self._options, name)
        backend = _C.ScalecommBackend(store, rank, world_size, config)
        pg = BaseProcessGroup(store, rank, world_size)
        pg._set_default_backend(BaseProcessGroup.BackendType.CUSTOM)
        pg._register_backend(torch.device("cpu"), BaseProcessGroup.BackendType.CUSTOM, backend)
        if torch.cuda.is_available():
            pg._register_backend(torch.device("cuda"), BaseProcessGroup.BackendType.CUSTOM, backend)
        self._backend = backend
        return pg

    def getBackendName(self) -> str:
        return "torchft-scalecomm"

    def _opts_hook(self, opts: T) -> T:
        # c10d options carry a per-call timeout; one left unset takes the
        # current set_timeout() value, so a change reaches the live group.
        timeout = getattr(opts, "timeout", None)
        if timeout is not None and timeout == _UNSET:
            opts.timeout = self._timeout
        return opts

    def abort(self, errored: bool = True) -> None:
        # torchft's abort calls the c10d group's abort(), which aborts our
        # backend: it poisons the group, closes its links, wakes every waiter.
        self._backend = None
        super().abort(errored=errored)

    def shutdown(self) -> None:
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.shutdown()  # finishes what is queued, tells the peers it leaves
        super().shutdown()

    def errored(self) -> Exception | None:
        """The live group's failure as an exception, or None while it works."""
        backend = self._backend
        why = backend.failure if backend is not None else None
        return RuntimeError(f"the scalecomm group was aborted: {why}") if why else None

    def __repr__(self) -> str:
        return f"ProcessGroupScalecomm(pg={self._pg})"
