"""The codecs on a GPU: their torch form on CUDA tensors sends the bytes the
host codecs send (the same random draws, computed on the device), and a
compressed allreduce of CUDA tensors, encoded on the GPU and sent over NCCL,
sums as the host codecs do after staging (tests/test_tensor_codecs.py runs
the same checks on the CPU), and DDP's C++ comm hook (hooks.register) on a
GPU averages as the Python hook does. Skipped without a GPU."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dist_helpers import run_ranks  # noqa: E402
from test_compress import CODECS, HOOK_SPECS, _hooks_side_by_side, check_hooks_side_by_side  # noqa: E402
from test_cuda_collectives import needs_two, pytestmark  # noqa: E402, F401  (the GPU marks)
from test_tensor_codecs import _both_forms, check_both_forms  # noqa: E402

from pyscalecomm import _C  # noqa: E402

ONE_ROUND = [s for s in CODECS if not s.startswith("powersgd")]


@pytest.mark.parametrize("spec", ONE_ROUND + ["topk:0.01", "qsgd:127"])
@pytest.mark.parametrize("n", [1, 257, 65537, 1_000_003])
def test_the_codecs_on_a_gpu_send_what_the_host_codecs_send(spec, n):
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=gen) * 3
    r = torch.randn(n, generator=gen) * 0.1
    host_out, host_payload, host_r = _C._testing.codec_encode(x, r, spec, seed=11, rank=1)
    out, payload, new_r = _C._testing.tensor_codec_encode(x.cuda(), r.cuda(), spec, seed=11, rank=1)
    assert payload.is_cuda and out.is_cuda
    name = spec.partition(":")[0]
    if name in ("fp16", "bf16", "randomk"):
        assert torch.equal(payload.cpu(), host_payload)
    elif name == "qsgd":  # the bucket norms' double sums may round apart: the levels nearly always agree
        assert (payload.cpu() != host_payload).float().mean() <= 1e-3
    if name in ("sign", "qsgd"):
        assert torch.allclose(out.cpu(), host_out, rtol=1e-5, atol=1e-6)
    elif name == "topk_sampled" and n > 65536:  # the host's is sampled; the GPU's exact
        assert int((out != 0).sum()) == int((host_out != 0).sum())
    else:
        assert torch.equal(out.cpu(), host_out)
    assert torch.allclose(new_r.cpu(), host_r, rtol=1e-5, atol=1e-5)


def test_the_draws_on_a_gpu_are_the_codecs_own():
    i = torch.arange(1 << 20)
    on_gpu = _C._testing.codec_draws(2**63 + 12345, i.cuda()).cpu()
    assert torch.equal(on_gpu, _C._testing.codec_draws(2**63 + 12345, i))


@needs_two
def test_compressed_allreduce_of_cuda_tensors_on_the_gpu_sums_as_the_host_codecs_do():
    check_both_forms(run_ranks(2, _both_forms, "cuda", timeout_s=300))


@needs_two
def test_the_cpp_ddp_hook_on_cuda_ddp_averages_as_the_python_hook():
    # hooks.register on a DDP module on the GPU: the codecs' torch form over NCCL per bucket.
    check_hooks_side_by_side(run_ranks(2, _hooks_side_by_side, HOOK_SPECS, 4, "cuda", timeout_s=300))
