"""scalecomm's element-wise reductions on the CPU against torch: every dtype and op,
every fp16/bf16 bit pattern, inf and NaN. The CUDA kernels share this per-element math
(csrc/core/elementwise.h); tests/gpu/test_cuda_kernels.py runs them on a GPU."""

import pytest
import torch
from kernel_cases import FLOATS, INTS, OPS_FLOAT, OPS_INT, operands, reference, same

from pyscalecomm import _C


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_reduce_into_matches_torch(dtype):
    for op in OPS_FLOAT if dtype.is_floating_point else OPS_INT:
        a, b = operands(dtype)
        want = reference(op, a, b)
        _C._testing.reduce_into(a, b, op)
        assert same(a, want), (dtype, op)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_scale_matches_torch(dtype):
    a, _ = operands(dtype)
    wide = a.float() if dtype in (torch.float16, torch.bfloat16) else a
    want = (wide * torch.tensor(0.3, dtype=wide.dtype)).to(dtype)  # factor in the accumulator type
    _C._testing.scale_(a, 0.3)
    assert same(a, want), dtype


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_divide_truncates_integers_and_rounds_floats_once(dtype):
    a, _ = operands(dtype)
    if dtype.is_floating_point:
        wide = a.float() if dtype in (torch.float16, torch.bfloat16) else a
        want = (wide / 3).to(dtype)
    else:
        want = torch.div(a.to(torch.int64), 3, rounding_mode="trunc").to(dtype)
    _C._testing.divide_(a, 3)
    assert same(a, want), dtype


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown reduction"):
        _C._testing.reduce_into(torch.ones(3), torch.ones(3), "mean")
    with pytest.raises(ValueError, match="not defined"):
        _C._testing.reduce_into(torch.ones(3), torch.ones(3), "band")
    with pytest.raises(ValueError, match="one dtype, size"):
        _C._testing.reduce_into(torch.ones(3), torch.ones(4), "sum")


def test_test_hooks_live_on_the_testing_submodule_not_the_api():
    for name in ("reduce_into", "scale_", "divide_", "codec_encode", "codec_random"):
        assert hasattr(_C._testing, name), name
        assert not hasattr(_C, name), f"_C.{name} is a test hook; it belongs on _C._testing"
