"""The codecs as torch operations (what runs on a CUDA tensor's own GPU),
checked on the CPU: the same random draws and wire formats as scalecomm's
host codecs, bit for bit where the codec is exact; compressed allreduces
through a group with codec_kernels=torch equal those of a group with the
host codecs in the same processes, within each codec's bound of gloo's exact
sum; and their error-feedback state survives a state_dict round trip."""

import math

import pytest
import torch
from dist_helpers import run_ranks
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compress import BOUNDS, CODECS

from pyscalecomm import _C

ONE_ROUND = [s for s in CODECS if not s.startswith("powersgd")]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), count=st.integers(1, 5000))
def test_the_draws_are_the_codecs_own(seed, count):
    draws = _C._testing.codec_draws(seed, torch.arange(count))
    uniform = ((draws >> 40) & ((1 << 24) - 1)).float() / 16777216.0
    assert torch.equal(uniform, _C._testing.codec_random("uniform", seed, count))


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.sampled_from([1, 7, 255, 256, 257, 1000, 65537]),
    spec=st.sampled_from(ONE_ROUND + ["topk:0.01", "qsgd:127", "randomk:0.5"]),
    zeros=st.sampled_from([0.0, 0.9]),
    feedback=st.booleans(),
    rank=st.integers(0, 3),
)
def test_the_torch_form_of_every_codec_sends_what_the_host_codec_sends(seed, n, spec, zeros, feedback, rank):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen) * 3
    x[torch.rand(n, generator=gen) < zeros] = 0
    r = torch.randn(n, generator=gen) * 0.1 if feedback else None
    host_out, host_payload, host_r = _C._testing.codec_encode(x, r, spec, seed=seed, rank=rank)
    out, payload, new_r = _C._testing.tensor_codec_encode(x, r, spec, seed=seed, rank=rank)
    assert payload.dtype == torch.uint8 and payload.numel() == _C.compressed_wire_bytes(spec, n)
    name = spec.partition(":")[0]
    if name in ("fp16", "bf16", "randomk", "qsgd"):
        assert torch.equal(payload, host_payload)  # the same bytes on the wire
    if name == "sign":  # block means summed in another order
        assert torch.allclose(out, host_out, rtol=1e-5, atol=1e-7)
    else:  # top-k: the same elements (ties aside: none here but zeros, which decode alike)
        assert torch.equal(out, host_out)
    if feedback:
        assert torch.allclose(new_r, host_r, rtol=1e-5, atol=1e-5)
    else:
        assert new_r is None


@pytest.mark.parametrize("levels", [1, 8, 127])
@pytest.mark.parametrize("kind", ["lone", "huge", "inf", "nan", "zeros"])
def test_qsgd_rounds_as_the_torch_form_at_the_edges_of_its_levels(levels, kind):
    """QSGD's host loop rounds branch-free (a scaled value at or over its top
    level, a bucket with an infinity or a NaN): its payload must still be
    the torch form's, byte for byte, with and without error feedback."""
    gen = torch.Generator().manual_seed(levels)
    for n in (1, 511, 513, 4096):
        x = torch.randn(n, generator=gen) * 3
        if kind == "lone":  # one value holds the bucket's norm: scaled at s, or a rounding over it
            x = torch.zeros(n)
            x[::512] = 5.0
        elif kind == "huge":
            x[0], x[-1] = 1e30, -1e30
        elif kind == "inf":
            x[n // 2] = float("inf")
        elif kind == "nan":
            x[::7] = float("nan")
        else:
            x[::3] = 0
        for r in (None, torch.randn(n, generator=gen) * 0.1):
            _, host, _ = _C._testing.codec_encode(x, r, f"qsgd:{levels}", seed=n, rank=1)
            _, torch_form, _ = _C._testing.tensor_codec_encode(x, r, f"qsgd:{levels}", seed=n, rank=1)
            assert torch.equal(host, torch_form), (n, r is not None)


def _both_forms(rank, n, device="cpu"):
    """Each codec through a group with codec_kernels=torch and one with host,
    three steps with error feedback, on tensors of `device` ("cuda": this
    rank's GPU, where the torch form runs on the GPU over NCCL and the host
    form stages through host memory); gloo's exact sum on the CPU."""
    import torch.distributed as dist

    import pyscalecomm

    dev = torch.device("cpu")
    if device == "cuda":
        from dist_helpers import rank_gpu

        dev = torch.device("cuda", rank_gpu(rank))
    # One algorithm for both: a summable codec's payload (fp16, bf16) is rounded at every
    # hop, so its bits follow the summation order, and auto may choose differently for two
    # groups by what it measures.
    torch_ops, host = (
        dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(codec_kernels=k, algorithm="ring"))
        for k in ("torch", "host")
    )
    gloo = dist.new_group(backend="gloo")
    out = {}
    for spec in CODECS:
        worst, same, err = 0.0, True, 0.0
        for step in range(3):  # error feedback carried from step to step
            gen = torch.Generator().manual_seed(1000 * rank + 10 * step + len(spec))
            x = torch.randn(157, 128, generator=gen)
            if not spec.startswith("powersgd"):  # PowerSGD factors a weight's own rows
                x = x.view(-1)
            exact = x.clone()
            dist.all_reduce(exact, group=gloo)
            x = x.to(dev)
            a, b = x.clone(), x.clone()
            pyscalecomm.allreduce(a, spec, group=torch_ops, key=spec)
            pyscalecomm.allreduce(b, spec, group=host, key=spec)
            same = same and torch.equal(a, b)
            worst = max(worst, float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)))
            if step == 0:  # the first step carries no residual: the codec's own error
                err = float((a.cpu() - exact).norm() / exact.norm())
        out[spec] = (same, worst, err)
    # The state on the torch form's side: a checkpoint taken, restored, and reset.
    x = torch.randn(3000, generator=torch.Generator().manual_seed(rank)).to(dev)
    for _ in range(3):
        pyscalecomm.allreduce(x.clone(), "topk:0.05", group=torch_ops, key="k")
    saved = pyscalecomm.compress.state_dict(group=torch_ops, device=dev.type)
    after = x.clone()
    pyscalecomm.allreduce(after, "topk:0.05", group=torch_ops, key="k")
    pyscalecomm.compress.reset(group=torch_ops, device=dev.type)
    pyscalecomm.compress.load_state_dict(saved, group=torch_ops, device=dev.type)
    again = x.clone()
    pyscalecomm.allreduce(again, "topk:0.05", group=torch_ops, key="k")
    pyscalecomm.compress.reset(group=torch_ops, device=dev.type)
    fresh = x.clone()
    pyscalecomm.allreduce(fresh, "topk:0.05", group=torch_ops, key="k")
    kept = saved["k"]
    restored, reset = torch.equal(after, again), torch.equal(after, fresh)
    out["state"] = (restored, reset, kept["residual"].numel(), kept["steps"])
    return out


def check_both_forms(results):
    for res in results:
        restored, same_after_reset, residual_numel, steps = res.pop("state")
        assert restored and not same_after_reset and residual_numel == 3000 and steps == 3
        for spec, (same, worst, err) in res.items():
            name = spec.partition(":")[0]
            if name in ("fp16", "bf16", "randomk", "qsgd", "topk", "topk_sampled"):
                assert same, (spec, worst)
            else:  # sign's block means, PowerSGD's products: another summation order
                assert worst <= 1e-4, (spec, worst)
            if name == "sign":  # which shows that the torch form ran
                assert worst > 0, spec
            assert err <= BOUNDS[spec], (spec, err)


@pytest.mark.parametrize("n", [2, 3])
def test_a_group_running_the_torch_form_sums_as_the_host_codecs_do(n):
    check_both_forms(run_ranks(n, _both_forms, timeout_s=240))


# A DDP bucket's weights: matrices PowerSGD factors, 1-D weights it sums
# exactly, and a matrix too small to gain from factors (summed exactly too).
BUCKET_SHAPES = [[6, 5], [5], [8, 3, 1], [3], [2, 40], [12, 7]]


def _powersgd_per_weight(rank, n, device="cpu"):
    """PowerSGD of rank 2 over a bucket whose every matrix is, on each rank,
    of rank 1 (so the sum over two ranks is of rank 2): each weight factored
    in its own shape recovers gloo's exact sum, on both forms, in one call
    with two allreduces; the same values factored as one near-square matrix
    (no shapes) do not. Shapes that do not hold the tensor are refused."""
    import torch.distributed as dist

    import pyscalecomm
    from pyscalecomm.compress import _backend

    dev = torch.device("cpu")
    if device == "cuda":
        from dist_helpers import rank_gpu

        dev = torch.device("cuda", rank_gpu(rank))
    gen = torch.Generator().manual_seed(rank + 1)
    parts = []
    for shape in BUCKET_SHAPES:
        if len(shape) >= 2:
            cols = math.prod(shape[1:])
            u, v = torch.randn(shape[0], 1, generator=gen), torch.randn(1, cols, generator=gen)
            parts.append((u @ v).view(-1))
        else:
            parts.append(torch.randn(shape[0], generator=gen))
    x = torch.cat(parts)
    exact = x.clone()
    dist.all_reduce(exact, group=dist.new_group(backend="gloo"))
    out = {}
    for kernels in ("host", "torch"):
        group = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(codec_kernels=kernels))
        be = _backend(group, dev)
        for name, shapes in (("per weight", BUCKET_SHAPES), ("one matrix", [])):
            y = x.to(dev, copy=True)
            be.allreduce_compressed(y, "powersgd:2", f"{kernels} {name}", 0, False, shapes=shapes).wait()
            out[kernels, name] = float((y.cpu() - exact).norm() / exact.norm())
        try:
            be.allreduce_compressed(x.to(dev), "powersgd:2", "bad", 0, False, shapes=[[6, 5], [5]]).wait()
            out[kernels, "bad"] = "accepted"
        except ValueError as e:
            out[kernels, "bad"] = str(e)
    return out


def check_powersgd_per_weight(results):
    for res in results:
        for kernels in ("host", "torch"):
            assert res[kernels, "per weight"] < 1e-5, (kernels, res)
            assert res[kernels, "one matrix"] > 0.05, (kernels, res)
            bad = res[kernels, "bad"]
            assert "the shapes given hold 35 values, the tensor 226" in bad, bad


def test_powersgd_factors_each_weight_of_a_bucket_in_its_own_shape():
    check_powersgd_per_weight(run_ranks(2, _powersgd_per_weight, timeout_s=120))


def _overflowed_step(rank, n, bad):
    """Each codec, with error feedback, on a group of each form: step 1's
    gradient on the last rank holds `bad` (inf or nan) in one element, or
    ("sum") a value that overflows with what its residual holds there, or
    ("range", fp16 only) a value above fp16's range, which its residual
    cannot keep."""
    import torch.distributed as dist

    import pyscalecomm

    out = {}
    for kernels in ("host", "torch"):
        group = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(codec_kernels=kernels))
        for spec in CODECS:
            if bad == "range" and spec != "fp16":
                continue
            seen = []
            for step in range(3):
                gen = torch.Generator().manual_seed(100 * rank + step)
                x = torch.randn(64, 80, generator=gen)
                if not spec.startswith("powersgd"):
                    x = x.view(-1)
                if step == 1 and rank == n - 1 and bad == "sum":
                    big = torch.finfo(torch.float32).max
                    x.view(-1)[17] = big
                    states = pyscalecomm.compress.state_dict(group=group)
                    states[spec]["residual"].view(-1)[17] = big
                    pyscalecomm.compress.load_state_dict(states, group=group)
                elif step == 1 and rank == n - 1:
                    x.view(-1)[17] = 70000.0 if bad == "range" else float(bad)
                pyscalecomm.allreduce(x, spec, group=group, key=spec, error_feedback=True)
                state = pyscalecomm.compress.state_dict(group=group)[spec]
                kept = [t for t in (state["residual"], state["q"]) if t is not None]
                seen.append((bool(torch.isfinite(x).all()), all(bool(torch.isfinite(t).all()) for t in kept)))
            out[f"{kernels} {spec}"] = seen
    return out


@pytest.mark.parametrize("bad", ["inf", "nan", "sum", "range"])
def test_an_overflowed_gradient_shows_in_every_ranks_sum_and_never_enters_the_state(bad):
    # A mixed-precision step whose gradient overflowed: the loss scaler skips
    # it when the sum is not finite, and the next step must start clean.
    for res in run_ranks(2, _overflowed_step, bad, timeout_s=240):
        for case, seen in res.items():
            assert seen == [(True, True), (False, True), (True, True)], (case, seen)
