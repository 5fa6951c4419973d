"""What ran, per operation and size bucket: pyscalecomm.stats(group) at any
time, SCALECOMM_SUMMARY=1 at destruction, the version line at INFO."""

import torch
import torch.distributed as dist
from dist_helpers import run_ranks

import pyscalecomm


def _calls(rank, n):
    for _ in range(3):
        dist.all_reduce(torch.ones(256))  # 1024 B
    dist.all_reduce(torch.ones(1000))  # 4000 B: the 4096 bucket
    dist.broadcast(torch.ones(10), 0)  # 40 B: the 64 bucket
    return pyscalecomm.stats()


def test_stats_count_every_call_in_its_size_bucket_with_its_busbw():
    for rows in run_ranks(2, _calls, env={"SCALECOMM_AUTOTUNE": "model"}, timeout_s=60):
        allreduce = {r["bucket_bytes"]: r for r in rows if r["operation"].startswith("allreduce")}
        assert allreduce[1024]["calls"] == 3 and allreduce[1024]["bytes"] == 3072, rows
        assert allreduce[4096]["calls"] == 1 and allreduce[4096]["bytes"] == 4000, rows
        (bcast,) = [r for r in rows if r["operation"].startswith("broadcast")]
        assert bcast["bucket_bytes"] == 64 and bcast["calls"] == 1, rows
        for r in allreduce.values():  # 2 ranks: busbw = algbw x 2(n-1)/n = algbw
            assert r["seconds"] > 0
            assert abs(r["busbw_GBps"] - r["bytes"] / r["seconds"] / 1e9) < 1e-9 * max(1.0, r["busbw_GBps"])


def _summary(rank, n):
    dist.all_reduce(torch.ones(256))
    dist.destroy_process_group()
    return "ok"


def test_summary_and_version_are_logged(capfd):
    env = {"SCALECOMM_SUMMARY": "1", "SCALECOMM_DEBUG": "INFO"}
    assert run_ranks(2, _summary, env=env, timeout_s=60) == ["ok", "ok"]
    err = capfd.readouterr().err
    assert f"scalecomm {pyscalecomm.__version__} (built " in err, err
    assert "group '0': operations by size bucket (SCALECOMM_SUMMARY=1)" in err, err
    assert "busbw(GB/s)" in err
    assert any(line.startswith("allreduce") and " 1024 " in line for line in err.splitlines()), err


def test_the_bench_and_the_groups_share_one_busbw_factor():
    from pyscalecomm.bench.specs import busbw_factor

    assert busbw_factor("allreduce", 4) == 1.5
    assert busbw_factor("allgather", 4) == 0.75 and busbw_factor("alltoall", 4) == 0.75
    assert busbw_factor("broadcast", 4) == 1.0 and busbw_factor("allreduce", 1) == 1.0
