"""The direct API on any array: NumPy in place and zero-copy, CuPy where it
imports and a GPU is present, the codec optional, clear refusals."""

import numpy as np
import pytest
import torch
from dist_helpers import rank_gpu, run_ranks

import pyscalecomm


def _numpy_in_place(rank, n):
    x = np.arange(6, dtype=np.float32) * (rank + 1)
    address = x.__array_interface__["data"][0]
    out = pyscalecomm.allreduce(x)
    ints = np.full(3, rank + 1, dtype=np.int64)
    biggest = pyscalecomm.allreduce(ints, op="max")
    halves = np.ones(4, dtype=np.float16) * (rank + 1)
    pyscalecomm.allreduce(halves, op="avg")
    compressed = np.ones(1 << 14, dtype=np.float32) * (rank + 1)
    pyscalecomm.allreduce(compressed, "fp16", key="numpy")
    work = pyscalecomm.allreduce(t := np.ones(3, dtype=np.float64), async_op=True)
    work.wait()
    tensor = torch.ones(2)
    same = pyscalecomm.allreduce(tensor) is tensor
    # torch's ReduceOp and any case, as dist.all_reduce users write them
    spelled = [np.full(2, rank + 1.0, dtype=np.float32) for _ in range(3)]
    pyscalecomm.allreduce(spelled[0], op=torch.distributed.ReduceOp.MAX)
    pyscalecomm.allreduce(spelled[1], op="SUM")
    pyscalecomm.allreduce(spelled[2], op="Prod")
    return (
        out is x,
        x.__array_interface__["data"][0] == address,
        x.tolist(),
        biggest is ints and ints.tolist() == [n] * 3,
        halves.tolist(),
        float(compressed.min()),
        float(compressed.max()),
        t.tolist(),
        same and tensor.tolist() == [n, n],
        [a.tolist() for a in spelled],
    )


def test_numpy_arrays_are_reduced_in_place_and_come_back_as_themselves():
    out = run_ranks(2, _numpy_in_place, timeout_s=60)
    for same, address, values, biggest, halves, lo, hi, t, tensor, spelled in out:
        assert spelled == [[2.0, 2.0], [3.0, 3.0], [2.0, 2.0]]
        assert same and address  # the caller's own object and memory: no copy
        assert values == [3 * v for v in range(6)]
        assert biggest and tensor
        assert halves == [1.5] * 4
        assert lo == hi == 3.0  # fp16 carries small integers exactly
        assert t == [2.0] * 3


def _refusals(rank, n):
    out = []
    for bad in (
        [1.0, 2.0],
        np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
        np.ones(3, dtype=np.float32).copy(),
    ):
        if isinstance(bad, np.ndarray) and bad.flags.c_contiguous:
            bad.flags.writeable = False
        try:
            pyscalecomm.allreduce(bad)
            out.append("no error")
        except (TypeError, ValueError) as e:
            out.append(str(e))
    for kwargs in ({"op": "median"}, {"op": "max", "compression": "fp16"}):
        try:
            pyscalecomm.allreduce(np.ones(3, dtype=np.float32), **kwargs)
            out.append("no error")
        except ValueError as e:
            out.append(str(e))
    x = np.ones(3, dtype=np.float32)
    pyscalecomm.allreduce(x)  # the group is still usable
    return out, x.tolist()


def test_what_cannot_be_reduced_in_place_is_refused_by_name():
    for errors, x in run_ranks(2, _refusals, timeout_s=60):
        assert "takes a torch.Tensor or an array with __dlpack__" in errors[0]
        assert "builtins.list" in errors[0]
        assert "numpy.ndarray is not contiguous" in errors[1] and "ascontiguousarray" in errors[1]
        assert "numpy.ndarray is read-only" in errors[2]
        assert "op 'median' is not one of sum, avg, product, min, max (any case) or torch" in errors[3]
        assert "compression 'fp16' sums or averages; op 'max' cannot" in errors[4]
        assert x == [2.0] * 3


def _cupy_in_place(rank, n):
    import cupy

    cupy.cuda.Device(rank_gpu(rank)).use()
    x = cupy.arange(4, dtype=cupy.float32) * (rank + 1)
    out = pyscalecomm.allreduce(x)
    return out is x, cupy.asnumpy(x).tolist()


@pytest.mark.gpu
def test_cupy_arrays_are_reduced_in_place_on_the_gpu():
    pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    for same, values in run_ranks(2, _cupy_in_place, timeout_s=120):
        assert same and values == [3.0 * v for v in range(4)]
