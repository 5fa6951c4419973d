"""Per-group options for the scalecomm backend."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass
class Options:
    """Settings for one scalecomm process group, passed as ``pg_options``.

    Any field left as ``None`` falls back to its ``SCALECOMM_*`` environment
    variable, then to the built-in default (see ``pyscalecomm.params()``).

    Attributes:
        algorithm: algorithm per collective: ``"rhd"`` (allreduce) or
            ``"allreduce:rhd,broadcast:tree"``; unnamed collectives use
            ``"auto"`` (picked per call by the cost model or a tuning file).
            ``"mpi"`` runs MPI's own collectives (ranks started by mpirun).
        ps_servers: server ranks of the ``ps`` allreduce (1: central server).
        tuning_file: file written by ``python -m pyscalecomm.tune``.
        transport: ``"auto"`` (shm on the same host; between hosts mpi when every
            rank runs under one mpirun, else tcp), ``"shm"``, ``"tcp"`` or ``"mpi"``.
        segment_bytes: pipelining unit in bytes (0: 256 KiB on one host, 1 MiB across hosts).
        send_ahead_bytes: pacing: how far a rank's sends within one step of a
            ring/rhd exchange may run ahead of what it has received in that step
            (-1: 1 MiB across hosts, off on one host; 0: off).
        shm_ring_bytes: bytes of each shared-memory ring.
        timeout: per-collective timeout; overrides ``init_process_group(timeout=...)``.
        cuda_transport: CUDA tensors: ``"auto"`` (allreduce with scalecomm's
            schedules over NCCL send/recv when built with NCCL, the rest staged
            through pinned host memory) or ``"host"`` (stage everything).
        compression: group default codec for allreduce (SUM/AVG) of floating
            tensors, e.g. ``"topk:0.01"`` (see pyscalecomm.compress); ``"none"`` off.
    """

    algorithm: str | None = None
    ps_servers: int | None = None
    tuning_file: str | None = None
    transport: str | None = None
    segment_bytes: int | None = None
    send_ahead_bytes: int | None = None
    shm_ring_bytes: int | None = None
    timeout: timedelta | None = None
    cuda_transport: str | None = None
    compression: str | None = None

    def apply_to(self, config) -> None:
        """Copies the fields that are set onto a ``_C.BackendConfig``."""
        if self.algorithm is not None:
            config.algorithm = self.algorithm
        if self.ps_servers is not None:
            config.ps_servers = int(self.ps_servers)
        if self.tuning_file is not None:
            config.tuning_file = str(self.tuning_file)
        if self.transport is not None:
            config.transport = self.transport
        if self.segment_bytes is not None:
            config.segment_bytes = int(self.segment_bytes)
        if self.send_ahead_bytes is not None:
            config.send_ahead_bytes = int(self.send_ahead_bytes)
        if self.shm_ring_bytes is not None:
            config.shm_ring_bytes = int(self.shm_ring_bytes)
        if self.timeout is not None:
            config.timeout_ms = _to_ms(self.timeout)
        if self.cuda_transport is not None:
            config.cuda_transport = self.cuda_transport
        if self.compression is not None:
            config.compression = self.compression


def _to_ms(t) -> int:
    if isinstance(t, timedelta):
        return max(1, int(t.total_seconds() * 1000))
    return max(1, int(float(t) * 1000))
