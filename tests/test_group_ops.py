"""Group-level operations: monitored_barrier and splitting a group."""

import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from dist_helpers import run_ranks


def _monitored(rank, n, late_ranks, wait_all):
    if rank in late_ranks:
        time.sleep(3.0)  # arrives after rank 0's deadline
    try:
        dist.monitored_barrier(timeout=timedelta(seconds=1), wait_all_ranks=wait_all)
    except RuntimeError as e:
        return str(e)
    return "passed"


def test_monitored_barrier_passes_when_everyone_arrives():
    assert run_ranks(3, _monitored, (), False) == ["passed"] * 3


@pytest.mark.parametrize("wait_all", [False, True])
def test_monitored_barrier_names_the_missing_ranks(wait_all):
    out = run_ranks(3, _monitored, (1, 2), wait_all, group_timeout_s=20)
    assert "monitored_barrier (rank 0)" in out[0], out[0]
    named = (
        "Ranks 1, 2 failed to pass monitoredBarrier" if wait_all else "Rank 1 failed to pass monitoredBarrier"
    )
    assert named in out[0], out[0]
    assert all(x != "passed" for x in out), out  # nobody passes a failed barrier


def _split(rank, n):
    mine = [0, 2] if rank % 2 == 0 else [1, 3]
    if rank % 2:
        time.sleep(1.0)  # one half splits while the other has finished with its group
    sub = dist.group.WORLD.split_group(mine, timeout=timedelta(seconds=30), group_name=f"split{mine[0]}")
    t = torch.full((5,), float(rank))
    sub.allreduce(t).wait()
    be = sub._get_backend(torch.device("cpu"))
    # The world's store lives in rank 0's process: rank 0 stays until every
    # rank has met its group (as any env:// job must).
    dist.barrier()
    return t[0].item(), sub.rank(), sub.size(), be.config.group_name


def test_split_makes_independent_scalecomm_groups():
    # torch's dist.split_group() itself insists on an accelerator-bound default
    # group; ProcessGroup.split_group is the call it makes, and reaches our split().
    out = run_ranks(4, _split)
    assert [o[:3] for o in out] == [(2.0, 0, 2), (4.0, 0, 2), (2.0, 1, 2), (4.0, 1, 2)], out
    assert out[0][3] == "split0" and out[1][3] == "split1", out
