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


_DIRECT_TYPES = ("float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64")
_DIRECT_OPS = {"sum": "SUM", "avg": "AVG", "product": "PRODUCT", "min": "MIN", "max": "MAX"}


def _direct_against_gloo(rank, n):
    """Every element type and op through the direct path (torch's dispatch
    made to fail, so nothing may go through it), against gloo's all_reduce
    of the same values; then out=, and a call queued behind an async one."""
    import torch.distributed as dist

    gloo = dist.new_group(backend="gloo")
    rng = np.random.default_rng(7 + rank)
    cases = []
    for name in _DIRECT_TYPES:
        for op in _DIRECT_OPS:
            if op == "avg" and not name.startswith("float"):
                continue  # gloo has no integer AVG
            small = name in ("int8", "uint8") or op == "product"
            values = rng.integers(1, 3 if small else 50, size=1000).astype(name)
            cases.append((name, op, values))
    expected = []
    for _name, op, values in cases:
        t = torch.from_numpy(values.astype(np.float64))  # gloo has no int16; the values are exact in float64
        if op == "avg":  # gloo: the sum, divided here
            dist.all_reduce(t, group=gloo)
            t = t / n
        else:
            dist.all_reduce(t, op=getattr(dist.ReduceOp, _DIRECT_OPS[op]), group=gloo)
        expected.append(t.numpy())
    real = dist.all_reduce
    dist.all_reduce = None  # the direct path must not call it
    try:
        got = []
        for _name, op, values in cases:
            arr = values.copy()
            assert pyscalecomm.allreduce(arr, op=op) is arr
            got.append(arr.astype(np.float64))
        tensor = torch.arange(5, dtype=torch.float32) * (rank + 1)
        pyscalecomm.allreduce(tensor, op="max")
        x = np.full(4, rank + 1.0, dtype=np.float32)
        y = np.zeros(4, dtype=np.float32)
        out = pyscalecomm.allreduce(x, out=y)
        frozen = np.full((2, 2), rank + 1, dtype=np.int64)
        frozen.flags.writeable = False  # out=: the input is only read
        into = pyscalecomm.allreduce(frozen, op="max", out=np.zeros((2, 2), dtype=np.int64))
        # every argument spelled out at its default, and a tensor subclass
        spelled = np.full(2, rank + 1, dtype=np.int32)
        defaults = {"group": None, "async_op": False, "key": "k", "error_feedback": None}
        pyscalecomm.allreduce(spelled, None, op="MAX", **defaults)
        param = torch.nn.Parameter(torch.full((3,), rank + 1.0), requires_grad=False)
        assert pyscalecomm.allreduce(param) is param
    finally:
        dist.all_reduce = real
    wrong = [
        (name, op)
        for (name, op, _v), e, g in zip(cases, expected, got, strict=True)
        if not np.allclose(g, e, rtol=2e-3)
    ]
    # the general path (here: a gloo group) takes out= and a read-only input alike
    through_gloo = pyscalecomm.allreduce(frozen, op="max", group=gloo, out=np.zeros((2, 2), dtype=np.int64))
    # a direct call issued while an async call is queued runs after it
    big = torch.full((1 << 20,), float(rank + 1))
    work = dist.all_reduce(big, async_op=True)
    after = np.full(3, rank + 1, dtype=np.int32)
    pyscalecomm.allreduce(after)
    work.wait()
    try:
        pyscalecomm.allreduce(x, out=np.zeros(5, dtype=np.float32))
        mismatch = "no error"
    except ValueError as e:
        mismatch = str(e)
    try:
        pyscalecomm.allreduce(x, opp="max")
        mismatch += " | no error"
    except TypeError as e:
        mismatch += " | " + str(e)
    return (
        len(cases),
        wrong,
        tensor.tolist(),
        out is y,
        x.tolist() == [rank + 1.0] * 4,  # the input is left as it was
        y.tolist() + into.ravel().tolist() + through_gloo.ravel().tolist(),
        after.tolist(),
        float(big[0]),
        mismatch,
        spelled.tolist() + param.tolist(),
    )


def test_host_arrays_take_the_direct_path_and_match_gloo_for_every_type_and_op():
    results = run_ranks(3, _direct_against_gloo, timeout_s=120)
    for count, wrong, tensor, is_out, kept, y, after, big, mismatch, spelled in results:
        assert count == 35 and wrong == []
        assert tensor == [3.0 * v for v in range(5)]
        assert is_out and kept
        assert y == [6.0] * 4 + [3] * 8
        assert after == [6] * 3 and big == 6.0
        assert "out has shape (5,)" in mismatch and "the input (4,)" in mismatch
        assert "unexpected keyword argument 'opp'" in mismatch
        assert spelled == [3, 3] + [6.0] * 3


def _direct_after_abort(rank, n):
    import torch.distributed as dist

    x = np.ones(3, dtype=np.float32)
    pyscalecomm.allreduce(x)
    dist.group.WORLD._get_backend(torch.device("cpu")).abort()
    try:
        pyscalecomm.allreduce(x)
        error = "no error"
    except dist.DistBackendError as e:
        error = str(e)
    # a new default group after the old one is destroyed serves the next call
    dist.destroy_process_group()
    dist.init_process_group("scalecomm", store=dist.HashStore(), rank=0, world_size=1)
    y = np.full(2, 5.0, dtype=np.float32)
    pyscalecomm.allreduce(y, op="max")
    return error, y.tolist()


def test_a_direct_call_on_an_aborted_group_raises_naming_the_call_and_rank():
    for rank, (error, after) in enumerate(run_ranks(2, _direct_after_abort, timeout_s=60)):
        assert f"scalecomm allreduce (rank {rank}" in error and "aborted" in error, error
        assert after == [5.0, 5.0]


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
