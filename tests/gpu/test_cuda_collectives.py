"""CUDA tensors through the backend: every collective against CPU references,
our schedules over NCCL against NCCL's own allreduce, PyTorch's stream
semantics (work queued on a side stream before the call is seen; Work.wait()
orders the current stream, not the CPU), the timeout/abort path, and DDP on
CUDA. One GPU per rank for NCCL (NCCL refuses two ranks on one GPU); the host
staging tests share GPU 0. Skipped without GPUs.

Run on a GPU machine:  python -m pytest -m gpu tests
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dist_helpers import run_ranks  # noqa: E402

from pyscalecomm import _C  # noqa: E402

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU"),
    pytest.mark.skipif(not _C.built_with_cuda, reason="built without CUDA"),
]
needs_two = pytest.mark.skipif(GPUS < 2 or not _C.built_with_nccl, reason="needs 2 GPUs and NCCL")


def _device(rank, shared):
    return torch.device("cuda", 0 if shared else rank)


def _every_collective(rank, n, shared):
    import torch.distributed as dist

    dev = _device(rank, shared)
    torch.cuda.set_device(dev)
    out = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
        x = (torch.arange(1001, device=dev) % 13 + rank).to(dtype)
        y = x.clone()
        dist.all_reduce(y)
        want = sum((torch.arange(1001) % 13 + r).to(dtype).float() for r in range(n))
        out[f"allreduce {dtype}"] = bool(torch.equal(y.cpu().float(), want))
    b = torch.full((77,), float(rank), device=dev)
    dist.broadcast(b, src=n - 1)
    out["broadcast"] = bool((b.cpu() == n - 1).all())
    g = torch.empty(n * 5, device=dev)
    dist.all_gather_into_tensor(g, torch.full((5,), float(rank), device=dev))
    out["all_gather_into_tensor"] = g.cpu().tolist() == [float(r) for r in range(n) for _ in range(5)]
    rs = torch.empty(3, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(3 * n, dtype=torch.float32, device=dev))
    out["reduce_scatter_tensor"] = rs.cpu().tolist() == [float(n * (3 * rank + i)) for i in range(3)]
    a2a = torch.empty(n, device=dev)
    dist.all_to_all_single(a2a, torch.full((n,), float(rank), device=dev))
    out["all_to_all_single"] = a2a.cpu().tolist() == [float(r) for r in range(n)]
    if rank == 0:
        dist.send(torch.full((9,), 7.0, device=dev), dst=1)
    elif rank == 1:
        r = torch.zeros(9, device=dev)
        dist.recv(r, src=0)
        out["send/recv"] = bool((r.cpu() == 7).all())
    return out


ALGOS = [
    "allreduce:ring",
    "allreduce:rhd,broadcast:tree,reduce:tree",
    "allreduce:tree",
    "allreduce:direct",
    "allreduce:ps",
    "allreduce:nccl,broadcast:nccl,reduce:nccl,allgather:nccl,reduce_scatter:nccl",
]


@needs_two
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("segment", ["256", "4194304"])
def test_every_collective_every_algorithm_over_nccl(algo, segment):
    """The queued channel on real NCCL: what tests/cpp/test_queued_channel.cc runs on its CPU emulation."""
    env = {"SCALECOMM_CUDA_TRANSPORT": "auto", "SCALECOMM_ALGO": algo, "SCALECOMM_SEGMENT_BYTES": segment}
    results = run_ranks(2, _every_collective, False, env=env)
    for r in results:
        assert all(r.values()), {k: v for k, v in r.items() if not v}


@pytest.mark.parametrize("transport", ["host", "auto"])
def test_every_collective_on_cuda_tensors(transport):
    if transport == "auto" and (GPUS < 2 or not _C.built_with_nccl):
        pytest.skip("needs 2 GPUs and NCCL")
    shared = transport == "host"
    results = run_ranks(2, _every_collective, shared, env={"SCALECOMM_CUDA_TRANSPORT": transport})
    for r in results:
        assert all(r.values()), r


def _allreduce_algorithms(rank, n):
    import torch.distributed as dist

    import pyscalecomm

    torch.cuda.set_device(rank)
    out = {}
    for algo in pyscalecomm.allreduce_algorithms() + ["nccl"]:
        pg = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(algorithm=algo))
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX):
            x = torch.arange(100_003, dtype=torch.float32, device="cuda") % 11 + rank
            dist.all_reduce(x, op=op, group=pg)
            ref = [torch.arange(100_003, dtype=torch.float32) % 11 + r for r in range(n)]
            want = torch.stack(ref).max(0).values if op == dist.ReduceOp.MAX else sum(ref)
            if op == dist.ReduceOp.AVG:
                want = want / n
            out[f"{algo} {op}"] = bool(torch.allclose(x.cpu(), want))
    return out


@needs_two
def test_our_schedules_over_nccl_match_nccl():
    for r in run_ranks(2, _allreduce_algorithms, timeout_s=300):
        assert all(r.values()), r


def _stream_semantics(rank, n):
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    side = torch.cuda.Stream()
    x = torch.zeros(1 << 22, device="cuda")
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # keeps the side stream busy ~tens of ms
        x.fill_(rank + 1)  # the collective must see this
        work = dist.all_reduce(x, async_op=True)
        work.wait()  # orders `side` after the collective; the CPU returns early
        y = x * 2
    side.synchronize()
    return bool((y.cpu() == 2 * sum(range(1, n + 1))).all())


@needs_two
def test_collective_follows_the_callers_stream_and_wait_orders_it():
    assert all(run_ranks(2, _stream_semantics))


def _future_completes_with_gpu_work(rank, n):
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    x = torch.ones(1 << 20, device="cuda")
    fut = dist.all_reduce(x, async_op=True).get_future()
    fut.wait()
    return float(fut.value()[0][0].item())


@needs_two
def test_future_value_is_the_reduced_tensor():
    assert run_ranks(2, _future_completes_with_gpu_work) == [2.0, 2.0]


def _timeout_on_dead_peer(rank, n):
    import torch.distributed as dist

    import pyscalecomm

    torch.cuda.set_device(rank)
    pg = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(timeout=2.0))
    if rank == 1:
        return "skipped"
    x = torch.ones(1 << 20, device="cuda")
    try:
        dist.all_reduce(x, group=pg)
        torch.cuda.synchronize()
        dist.all_reduce(x, group=pg)  # the group is poisoned by the timed-out one
    except Exception as e:  # noqa: BLE001
        return str(e)
    return "no error"


@needs_two
def test_missing_peer_times_out_and_aborts_nccl():
    r = run_ranks(2, _timeout_on_dead_peer, timeout_s=120)
    assert "timeout" in r[0].lower() or "timed out" in r[0].lower(), r[0]


def _ddp(rank, n):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
    ddp = DDP(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(rank)
    for _ in range(5):
        opt.zero_grad()
        ddp(torch.randn(16, 32, device="cuda")).sum().backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(n)]
    dist.all_gather(gathered, flat)
    return bool(all(torch.equal(g, flat) for g in gathered))


@needs_two
def test_ddp_on_two_gpus_keeps_replicas_identical():
    assert all(run_ranks(2, _ddp))


@needs_two
def test_bench_prints_our_ring_over_nccl_and_nccls_own_in_one_table(tmp_path):
    import json
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyscalecomm.bench",
            "--nproc",
            "2",
            "--device",
            "cuda",
            "--algos",
            "ring,nccl",
        ]
        + ["-b", "1M", "-e", "64M", "-f", "8", "-n", "5", "--json", str(tmp_path / "b.jsonl")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [json.loads(line) for line in open(tmp_path / "b.jsonl")]
    labels = {r["implementation"] for r in rows}
    assert {"scalecomm:ring", "scalecomm:nccl", "nccl"} <= labels, labels
    assert all(r["wrong"] == 0 for r in rows)
