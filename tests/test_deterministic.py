"""Deterministic groups: every reduction's element is the left fold of the
ranks' values in rank order, bit for bit, whatever the algorithm choice,
segment size, message size, transport and host layout; DDP under it trains
to the same bits with different algorithms and bucket sizes. Checked against
the left fold computed in one process (and gloo's sum, to rounding); and,
so that the check can fail, a group that is not deterministic is shown to
give other bits on the same inputs."""

import os

import pytest
import torch
from dist_helpers import run_ranks

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# Elements: 1 and 7 (fewer than the ranks: empty chunks), odd sizes, one
# above the shared window (512 KiB: its slices).
COUNTS = [1, 7, 1000, 4099, 200_003]
SEEDS = [0, 1]


def _inputs(n, count, dtype, seed):
    """Every rank's input (each process makes all of them): magnitudes over
    eight decades and both signs, so the order of a sum shows in its bits."""
    g = torch.Generator().manual_seed(seed * 1000 + count)
    out = []
    for _ in range(n):
        scale = 10.0 ** torch.randint(-4, 4, (count,), generator=g).double()
        out.append((torch.randn(count, generator=g, dtype=torch.float64) * scale).to(dtype))
    return out


def _left_fold(xs, average=False):
    """r0 + r1 + ... + r(n-1), each step rounded to the dtype (torch's CPU
    add widens fp16 and bf16 to fp32 and rounds once, as scalecomm does)."""
    acc = xs[0].clone()
    for x in xs[1:]:
        acc = acc + x
    return acc / len(xs) if average else acc


def _bits(t):
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


# name -> (Options fields, host name of rank r or None)
CONFIGS = {
    "auto": ({}, None),  # shared windows on this host
    "shared": ({"algorithm": "shared"}, None),
    "ordered, no windows, 4 KiB segments": (
        {"algorithm": "ordered", "shm_window_bytes": 0, "segment_bytes": 4096},
        None,
    ),
    "tcp, 64 KiB segments": ({"transport": "tcp", "segment_bytes": 65536}, None),
    "two hosts, ranks interleaved": ({}, lambda r: f"h{r % 2}"),
    "two hosts, ranks consecutive": ({}, lambda r: f"h{int(r >= 2)}"),
}


def _fold_everywhere(rank, n):
    import torch.distributed as dist

    import pyscalecomm

    groups = {}
    for name, (fields, host) in CONFIGS.items():
        if host is not None:
            os.environ["SCALECOMM_HOSTNAME"] = host(rank)
        groups[name] = dist.new_group(
            backend="scalecomm", pg_options=pyscalecomm.Options(deterministic=1, timeout=60, **fields)
        )
        os.environ.pop("SCALECOMM_HOSTNAME", None)
    plain = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(algorithm="ring"))
    gloo = dist.new_group(backend="gloo")
    wrong, checked, ring_differs, gloo_far = [], 0, set(), []
    for dtype in DTYPES:
        for count in COUNTS:
            for seed in SEEDS:
                xs = _inputs(n, count, dtype, seed)
                mine = xs[rank]
                want = {"sum": _left_fold(xs), "avg": _left_fold(xs, average=True)}
                # reduce_scatter: rank q's block q of everyone's n blocks.
                rs_in = [torch.cat([x] * n) for x in xs]
                for name, group in groups.items():
                    for op in ("sum", "avg"):
                        t = mine.clone()
                        dist.all_reduce(t, op=getattr(dist.ReduceOp, op.upper()), group=group)
                        if not torch.equal(_bits(t), _bits(want[op])):
                            wrong.append((name, "all_reduce", op, str(dtype), count, seed))
                    out = torch.empty_like(mine)
                    dist.reduce_scatter_tensor(out, rs_in[rank], group=group)
                    if not torch.equal(_bits(out), _bits(want["sum"])):
                        wrong.append((name, "reduce_scatter", "sum", str(dtype), count, seed))
                    for root in sorted({0, max(n - 2, 0), n - 1}):  # before, at and after the chain's end
                        t = mine.clone()
                        dist.reduce(t, dst=root, group=group)
                        if rank == root and not torch.equal(_bits(t), _bits(want["sum"])):
                            wrong.append((name, f"reduce to {root}", "sum", str(dtype), count, seed))
                    checked += 1
                t = mine.clone()
                dist.all_reduce(t, group=plain)
                if not torch.equal(_bits(t), _bits(want["sum"])):
                    ring_differs.add(str(dtype))
                exact = mine.double()
                dist.all_reduce(exact, group=gloo)
                tol = {torch.float16: 2e-2, torch.bfloat16: 1e-1}.get(dtype, 1e-5)
                err = (want["sum"].double() - exact).abs().max() / exact.abs().max()
                if err > tol:
                    gloo_far.append((str(dtype), count, float(err)))
    return wrong, checked, sorted(ring_differs), gloo_far


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_every_configuration_gives_the_left_fold_in_rank_order_bit_for_bit(n):
    for wrong, checked, ring_differs, gloo_far in run_ranks(n, _fold_everywhere, timeout_s=300):
        assert checked == len(CONFIGS) * len(DTYPES) * len(COUNTS) * len(SEEDS)
        assert not wrong, wrong[:10]
        assert not gloo_far, gloo_far
        if n >= 3:  # the inputs are ones whose sum's bits depend on its order
            assert ring_differs == sorted(str(d) for d in DTYPES)


def _ddp_weights(rank, n, fields, bucket_cap_mb):
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import pyscalecomm

    group = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(**fields))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    model = DDP(model, process_group=group, bucket_cap_mb=bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(8):
        x = torch.randn(32, 64, generator=g) * (1 + 100 * rank)
        y = torch.randint(0, 10, (32,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _ddp_runs(rank, n):
    runs = {
        "deterministic, auto, 25 MB buckets": ({"deterministic": 1}, 25),
        "deterministic, tcp, 0.05 MB buckets": ({"deterministic": 1, "transport": "tcp"}, 0.05),
        "ring": ({"algorithm": "ring"}, 25),
        "shared": ({"algorithm": "shared"}, 25),
    }
    # As NumPy arrays: a torch tensor would travel as shared memory its rank frees on exit.
    return {name: _ddp_weights(rank, n, fields, mb).numpy() for name, (fields, mb) in runs.items()}


def test_ddp_trains_to_the_same_bits_with_other_algorithms_and_buckets():
    for weights in run_ranks(3, _ddp_runs, timeout_s=300):
        w = {name: torch.from_numpy(a) for name, a in weights.items()}
        a, b = w["deterministic, auto, 25 MB buckets"], w["deterministic, tcp, 0.05 MB buckets"]
        assert torch.equal(_bits(a), _bits(b)), float((a - b).abs().max())
        # Without it, two algorithms' sums differ in their last bits, and training carries that on.
        assert not torch.equal(w["ring"], w["shared"])


def _refusals(rank, n):
    import torch.distributed as dist

    import pyscalecomm

    out = []
    for fields in ({"algorithm": "ring"}, {"algorithm": "reduce_scatter:ring"}, {"codec_kernels": "torch"}):
        try:
            dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(deterministic=1, **fields))
            out.append(None)
        except Exception as e:  # noqa: BLE001
            out.append(str(e))
    return out


def test_a_deterministic_group_refuses_what_does_not_fold_in_rank_order():
    for ring, rs_ring, torch_codecs in run_ranks(2, _refusals):
        assert ring and "allreduce is set to ring" in ring and "rank " in ring and "ordered" in ring
        assert rs_ring and "reduce_scatter is set to ring" in rs_ring
        assert torch_codecs and "codec_kernels=torch" in torch_codecs
