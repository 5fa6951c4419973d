"""The transport conformance grid: every link and channel the host side has
x world sizes, each running tests/conformance.py (every collective x dtypes x
counts, against gloo in the same processes).

A new transport joins with one entry in TRANSPORTS: its id, what it is, the
settings that make its ranks use it, what their log shows when they do, and
whether they need mpirun. The device channels (NCCL, and the emulated queued
channel the C++ tests run) have their own suites: tests/gpu and
tests/cpp/test_queued_channel.cc.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

import pytest
from conformance import check_all
from dist_helpers import mpirun, run_ranks

import pyscalecomm

HERE = os.path.dirname(os.path.abspath(__file__))
# Schedules that run on the links (not the shared windows auto would pick on one host).
ON_LINKS = "allreduce:ring,broadcast:chain,reduce:chain"


@dataclass(frozen=True)
class Transport:
    id: str
    what: str
    env: dict = field(default_factory=dict)
    # What the ranks' log (SCALECOMM_DEBUG=INFO) must show: that they used it.
    shows: tuple = ()
    mpirun: bool = False
    worlds: tuple = (2, 3)
    # The 2^20+5-element count (4-8 MiB a rank); off where the entry's small
    # buffers make it take minutes without exercising anything the other
    # counts do not.
    large: bool = True


TRANSPORTS = [
    Transport(
        "shm",
        "shm links",
        {"SCALECOMM_TRANSPORT": "shm", "SCALECOMM_ALGO": ON_LINKS},
        shows=("via shm", "allreduce:ring"),
    ),
    Transport(
        "shm-tiny",
        "shm, 4 KiB rings and 1000-byte segments (wrap-around, back-pressure)",
        {
            "SCALECOMM_TRANSPORT": "shm",
            "SCALECOMM_ALGO": ON_LINKS,
            "SCALECOMM_SHM_RING_BYTES": 4096,
            "SCALECOMM_SEGMENT_BYTES": 1000,
        },
        shows=("via shm", "shm_ring_bytes=4096", "allreduce:ring"),
        large=False,
    ),
    Transport(
        "tcp",
        "tcp links",
        {"SCALECOMM_TRANSPORT": "tcp", "SCALECOMM_ALGO": ON_LINKS},
        shows=("via tcp", "allreduce:ring"),
    ),
    Transport(
        "tcp-striped",
        "tcp, 3 sockets per peer (striped)",
        {"SCALECOMM_TRANSPORT": "tcp", "SCALECOMM_ALGO": ON_LINKS, "SCALECOMM_SOCKETS_PER_PEER": 3},
        shows=("via tcp", "sockets_per_peer=3", "allreduce:ring"),
    ),
    Transport(
        "windows",
        "shared windows of 4 KiB (chunked above)",
        {"SCALECOMM_ALGO": "allreduce:shared", "SCALECOMM_SHM_WINDOW_BYTES": 4096},
        shows=("via shm", "allreduce:shared"),
    ),
    Transport(
        "two-hosts",
        "two emulated hosts (shm inside, tcp between, hierarchical allreduce)",
        {"SCALECOMM_HOSTNAME": ["a", "b", "a", "b"], "SCALECOMM_ALGO": "allreduce:hier"},
        shows=("via tcp", "allreduce:hier"),
        worlds=(2, 4),
    ),
    Transport(
        "mpi",
        "mpi links",
        {"SCALECOMM_TRANSPORT": "mpi", "SCALECOMM_MPI_ZERO_COPY": 0},
        shows=("via mpi",),
        mpirun=True,
    ),
    Transport(
        "mpi-channel",
        "the mpi channel (zero copy)",
        {"SCALECOMM_TRANSPORT": "mpi", "SCALECOMM_MPI_ZERO_COPY": 1},
        shows=("via mpi", "(mpi channel)"),
        mpirun=True,
    ),
]

GRID = [pytest.param(t, n, id=f"{t.id}-n{n}") for t in TRANSPORTS for n in t.worlds]


def _mpirun(n: int, env: dict) -> str:
    if shutil.which("mpirun") is None or not pyscalecomm.built_with_mpi():
        pytest.skip("needs mpirun and a build with MPI (apt-get install openmpi-bin libopenmpi-dev)")
    return mpirun(n, [os.path.join(HERE, "conformance.py")], env, timeout=300)


@pytest.mark.parametrize("transport,n", GRID)
def test_every_collective_matches_gloo_on(transport, n, capfd):
    env = {k: (v[:n] if isinstance(v, list) else v) for k, v in transport.env.items()}
    env["SCALECOMM_DEBUG"] = "INFO"
    env["CONFORMANCE_LARGE"] = "1" if transport.large else "0"
    if transport.mpirun:
        log = _mpirun(n, env)
    else:
        checks = run_ranks(n, check_all, env=env, timeout_s=300)
        assert len(set(checks)) == 1 and checks[0] >= 400, checks
        log = capfd.readouterr().err
    missing = [s for s in transport.shows if s not in log]
    assert not missing, f"the ranks did not run on {transport.what}: no {missing} in their log\n{log[-3000:]}"
