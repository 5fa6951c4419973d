"""CUDA tensors through the backend: every collective against CPU references,
our schedules over NCCL against NCCL's own allreduce, PyTorch's stream
semantics (work queued on a side stream before the call is seen; Work.wait()
orders the current stream, not the CPU), the timeout/abort path, and DDP on
CUDA. One GPU per rank for NCCL; the host staging tests share GPU 0. Skipped
without GPUs.

One GPU: NCCL refuses two ranks on one device, unless each rank names another
host (NCCL_HOSTID); NCCL then joins them through its socket transport over
loopback. SC_TEST_SHARE_GPU=1 runs the NCCL tests that way: every call
our NCCL channel makes is real, NCCL's fast paths (P2P, NVLink) are not used,
and the two ranks' kernels take turns on the GPU, so timings mean nothing.

Run on a GPU machine:  python -m pytest -m gpu tests
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dist_helpers import rank_gpu, run_ranks  # noqa: E402

from pyscalecomm import _C  # noqa: E402

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU"),
    pytest.mark.skipif(not _C.built_with_cuda, reason="built without CUDA"),
]
SHARE_ONE_GPU = GPUS == 1 and os.environ.get("SC_TEST_SHARE_GPU") == "1"
NCCL_RANKS = (GPUS >= 2 or SHARE_ONE_GPU) and _C.built_with_nccl
needs_two = pytest.mark.skipif(not NCCL_RANKS, reason="needs 2 GPUs (or 1 with SC_TEST_SHARE_GPU=1) and NCCL")


def _device(rank, shared=False):
    """This rank's GPU, made current: GPU 0 for both ranks when `shared` (host staging)."""
    if shared:
        torch.cuda.set_device(0)
        return torch.device("cuda", 0)
    return torch.device("cuda", rank_gpu(rank))


DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.uint8)


def _case(out, name, check, *args):
    """Runs check(*args); records True, or why it failed (a wrong value or the exception), so
    a failing run names every failing case with its reason, not just the first."""
    try:
        ok = check(*args)
        out[name] = True if ok is None or ok is True else f"wrong: {ok}"
    except Exception as e:  # noqa: BLE001 - reported per case
        out[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        import torch.distributed as dist

        print(f"rank {dist.get_rank()}: {name}: {out[name]}", file=sys.stderr, flush=True)


def _failures(results):
    return {f"rank {r} {k}": v for r, res in enumerate(results) for k, v in res.items() if v is not True}


def _every_collective(rank, n, shared):
    """Every collective x DTYPES on CUDA tensors (small integers: exact in every dtype).
    Returns {case: True or the reason it failed}."""
    import torch.distributed as dist

    dev = _device(rank, shared)

    def full(size, value, dtype):
        return torch.full((size,), value, dtype=dtype, device=dev)

    def same(t, values):
        got = t.cpu().double().tolist()
        want = [float(v) for v in values]
        if got == want:
            return True
        if len(got) != len(want):
            return f"{len(got)} elements, want {len(want)}"
        bad = next(i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
        return f"element {bad}: got {got[bad]}, want {want[bad]} ({len(got)} elements)"

    out = {}

    def allreduce(dt, count, modulus):
        x = (torch.arange(count, device=dev) % modulus + rank).to(dt)
        dist.all_reduce(x)
        return same(x, [sum(i % modulus + r for r in range(n)) for i in range(count)])

    def broadcast(dt, count):
        b = full(count, rank, dt)
        dist.broadcast(b, src=n - 1)
        return same(b, [n - 1] * count)

    def reduce(dt):
        red = full(33, rank + 1, dt)
        dist.reduce(red, dst=0)
        return same(red, [n * (n + 1) // 2] * 33) if rank == 0 else True

    def large_reduce(dt):
        big = full(10_001, rank + 1, dt)
        dist.reduce(big, dst=0, op=dist.ReduceOp.MAX)
        return same(big, [n if rank == 0 else rank + 1] * 10_001)

    def all_gather_into_tensor(dt):
        g = torch.empty(n * 5, dtype=dt, device=dev)
        dist.all_gather_into_tensor(g, full(5, rank, dt))
        return same(g, [r for r in range(n) for _ in range(5)])

    def blocks(tensors, values):
        bad = [same(t, v) for t, v in zip(tensors, values, strict=True)]
        return next((f"block {r}: {b}" for r, b in enumerate(bad) if b is not True), True)

    def all_gather(dt):
        outs = [torch.empty(4, dtype=dt, device=dev) for _ in range(n)]
        dist.all_gather(outs, full(4, rank + 2, dt))
        return blocks(outs, [[r + 2] * 4 for r in range(n)])

    def reduce_scatter_tensor(dt):
        rs = torch.empty(3, dtype=dt, device=dev)
        dist.reduce_scatter_tensor(rs, (torch.arange(3 * n, device=dev) % 7).to(dt))
        return same(rs, [n * ((3 * rank + i) % 7) for i in range(3)])

    def all_to_all_single(dt):
        a2a = torch.empty(n, dtype=dt, device=dev)
        dist.all_to_all_single(a2a, full(n, rank, dt))
        return same(a2a, range(n))

    def gather(dt):
        gat = [torch.empty(4, dtype=dt, device=dev) for _ in range(n)] if rank == 0 else None
        dist.gather(full(4, rank, dt), gat, dst=0)
        return blocks(gat, [[r] * 4 for r in range(n)]) if rank == 0 else True

    def scatter(dt):
        sc = torch.empty(6, dtype=dt, device=dev)
        dist.scatter(sc, [full(6, r, dt) for r in range(n)] if rank == 0 else None, src=0)
        return same(sc, [rank] * 6)

    def send_recv(dt):
        if rank == 0:
            dist.send(full(9, 7, dt), dst=1)
        elif rank == 1:
            r = torch.zeros(9, dtype=dt, device=dev)
            dist.recv(r, src=0)
            return same(r, [7] * 9)
        return True

    def batch_isend_irecv(dt):  # a ring shift in one batch: send right, receive from the left
        got = torch.zeros(5, dtype=dt, device=dev)
        ops = [
            dist.P2POp(dist.isend, full(5, rank, dt), (rank + 1) % n),
            dist.P2POp(dist.irecv, got, (rank - 1) % n),
        ]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return same(got, [(rank - 1) % n] * 5)

    cases = (
        reduce,
        all_gather_into_tensor,
        all_gather,
        reduce_scatter_tensor,
        all_to_all_single,
        gather,
        scatter,
    )
    for dt in DTYPES:
        _case(out, f"allreduce {dt}", allreduce, dt, 1001, 13)
        _case(out, f"broadcast {dt}", broadcast, dt, 77)
        for case in cases + (send_recv, batch_isend_irecv):
            _case(out, f"{case.__name__} {dt}", case, dt)
    for dt in (torch.float32, torch.float16):  # large enough to be staged in chunks (host transport)
        _case(out, f"large allreduce {dt}", allreduce, dt, 10_001, 5)
        _case(out, f"large broadcast {dt}", broadcast, dt, 10_001)
        _case(out, f"large reduce {dt}", large_reduce, dt)
    _case(out, "barrier", dist.barrier)
    return out


@pytest.mark.parametrize("transport", ["host", "auto"])
def test_every_collective_on_cuda_tensors(transport):
    if transport == "auto" and not NCCL_RANKS:
        pytest.skip("needs 2 GPUs (or 1 with SC_TEST_SHARE_GPU=1) and NCCL")
    shared = transport == "host"
    # Host staging in 4 KiB chunks: the 10001-element allreduce, broadcast and reduce move in 5-10 chunks.
    env = {"SCALECOMM_CUDA_TRANSPORT": transport}
    if shared:
        env["SCALECOMM_STAGE_CHUNK_BYTES"] = "4096"
    results = run_ranks(2, _every_collective, shared, env=env)
    assert not _failures(results), _failures(results)


def _allreduce_algorithms(rank, n):
    import torch.distributed as dist

    import pyscalecomm

    dev = _device(rank)

    def check(pg, op, count):
        x = torch.arange(count, dtype=torch.float32, device=dev) % 11 + rank
        dist.all_reduce(x, op=op, group=pg)
        ref = [torch.arange(count, dtype=torch.float32) % 11 + r for r in range(n)]
        want = torch.stack(ref).max(0).values if op == dist.ReduceOp.MAX else sum(ref)
        if op == dist.ReduceOp.AVG:
            want = want / n
        got = x.cpu()
        if torch.allclose(got, want):
            return True
        bad = int((~torch.isclose(got, want)).nonzero()[0])
        return f"element {bad}: got {float(got[bad])}, want {float(want[bad])}"

    out = {}
    # scalecomm's own schedules, and the native entries that run on device memory (nccl)
    natives = [
        a["name"]
        for a in pyscalecomm.algorithm_table()
        if a["kind"] == "native" and a["memory"] == "device" and "allreduce" in a["collectives"]
    ]
    assert natives, "the algorithm table has no native allreduce on device memory"
    large = pyscalecomm.allreduce_algorithms(n, 400_012, window_bytes=1 << 30) + natives
    for algo in pyscalecomm.allreduce_algorithms() + natives:
        pg = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(algorithm=algo))
        count = 100_003 if algo in large else 1_003  # pairwise takes only small messages
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX):
            _case(out, f"{algo} {op}", check, pg, op, count)
    return out


@needs_two
def test_our_schedules_over_nccl_match_nccl():
    results = run_ranks(2, _allreduce_algorithms, timeout_s=300)
    assert not _failures(results), _failures(results)


def _stream_semantics(rank, n):
    import torch.distributed as dist

    _device(rank)
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

    _device(rank)
    x = torch.ones(1 << 20, device="cuda")
    fut = dist.all_reduce(x, async_op=True).get_future()
    fut.wait()
    return float(fut.value()[0][0].item())


@needs_two
def test_future_value_is_the_reduced_tensor():
    assert run_ranks(2, _future_completes_with_gpu_work) == [2.0, 2.0]


def _graph_capture(rank, n):
    import torch.distributed as dist

    _device(rank)
    x = torch.zeros(1 << 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up before capture (allocates our scratch)
        for _ in range(2):
            x.fill_(1.0)
            dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dist.all_reduce(x)
        x.mul_(2)
    seen = []
    for k in range(3):  # each replay runs the captured allreduce again, on new inputs
        x.fill_(float(rank + k))
        graph.replay()
        torch.cuda.synchronize()
        seen.append(bool((x.cpu() == 2 * sum(r + k for r in range(n))).all()))
    return seen


@needs_two
@pytest.mark.parametrize("algo", ["ring", "nccl"])
def test_allreduce_is_captured_into_a_cuda_graph_and_replays(algo):
    env = {"SCALECOMM_CUDA_TRANSPORT": "auto", "SCALECOMM_ALGO": f"allreduce:{algo}"}
    for r in run_ranks(2, _graph_capture, env=env):
        assert r == [True, True, True], r


def _timeout_on_dead_peer(rank, n):
    import torch.distributed as dist

    import pyscalecomm

    _device(rank)
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

    _device(rank)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
    ddp = DDP(model, device_ids=[torch.cuda.current_device()])
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
@pytest.mark.skipif(GPUS < 2, reason="the bench's ProcessGroupNCCL baseline needs a GPU per rank")
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


# Last: the longest (12 two-rank jobs), so a slow or stuck one leaves the others answered.
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
    assert not _failures(results), _failures(results)
