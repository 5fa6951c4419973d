"""The CUDA reduction kernels against the CPU reducer (which tests/test_kernels.py
checks against torch): every dtype and op, every fp16/bf16 bit pattern, aligned and
unaligned pointers, odd sizes. Skipped without a GPU or without CUDA kernels."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kernel_cases import FLOATS, INTS, OPS_FLOAT, OPS_INT, operands, same  # noqa: E402

from pyscalecomm import _C  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not _C.built_with_cuda, reason="built without CUDA kernels"),
]


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "unaligned"])
def test_cuda_reduce_matches_cpu_reducer(dtype, offset):
    for op in OPS_FLOAT if dtype.is_floating_point else OPS_INT:
        a, b = operands(dtype, n=1_000_003)
        # Sliced on the GPU: `offset` elements past an allocation's start (a copy would realign them).
        ga, gb = a.cuda()[offset:], b.cuda()[offset:]
        a, b = a[offset:], b[offset:]
        cpu = a.clone()
        _C._testing.reduce_into(cpu, b, op)
        _C._testing.reduce_into(ga, gb, op)
        torch.cuda.synchronize()
        assert same(ga.cpu(), cpu), (dtype, op, offset)


@pytest.mark.parametrize("n", [0, 1, 7, 4097])
def test_cuda_scale_and_divide_match_cpu(n):
    for dtype in FLOATS + INTS:
        a, _ = operands(dtype)
        a = a[:n].contiguous()
        if dtype.is_floating_point:
            cpu, gpu = a.clone(), a.cuda()
            _C._testing.scale_(cpu, 0.3)
            _C._testing.scale_(gpu, 0.3)
            assert same(gpu.cpu(), cpu), dtype
        cpu, gpu = a.clone(), a.cuda()
        _C._testing.divide_(cpu, 3)
        _C._testing.divide_(gpu, 3)
        assert same(gpu.cpu(), cpu), dtype


def test_kernels_run_on_the_current_stream():
    s = torch.cuda.Stream()
    a = torch.ones(1 << 20, device="cuda")
    b = torch.full_like(a, 2)
    with torch.cuda.stream(s):
        _C._testing.reduce_into(a, b, "sum")
    s.synchronize()
    assert torch.all(a == 3)
