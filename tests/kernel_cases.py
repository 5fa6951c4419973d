"""Inputs and torch references for scalecomm's element-wise reductions (shared by the
CPU tests and the GPU tests): every dtype and op, with fp16/bf16 covering every bit
pattern, and inf/NaN among the floats."""

import torch

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
OPS_FLOAT = ["sum", "prod", "min", "max"]
OPS_INT = OPS_FLOAT + ["band", "bor", "bxor"]


def operands(dtype, n=4099, seed=0):
    """(a, b) on the CPU: every 16-bit pattern for fp16/bf16, else random values with specials."""
    g = torch.Generator().manual_seed(seed)
    if dtype in (torch.float16, torch.bfloat16):
        bits = torch.arange(-32768, 32768, dtype=torch.int16)
        a = bits.view(dtype)
        b = bits[torch.randperm(bits.numel(), generator=g)].view(dtype)
        return a.clone(), b.clone()
    if dtype.is_floating_point:
        a = torch.randn(n, generator=g, dtype=torch.float64).mul_(1e3).to(dtype)
        b = torch.randn(n, generator=g, dtype=torch.float64).mul_(1e3).to(dtype)
        specials = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0], dtype=dtype)
        a[: specials.numel()] = specials
        b[1 : 1 + specials.numel()] = specials
        return a, b
    info = torch.iinfo(dtype)
    a = torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64).to(dtype)
    b = torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64).to(dtype)
    return a, b


def reference(op, a, b):
    """torch's result, computing fp16/bf16 in fp32 and rounding once (what scalecomm promises)."""
    wide = a.float() if a.dtype in (torch.float16, torch.bfloat16) else a
    wb = b.float() if b.dtype in (torch.float16, torch.bfloat16) else b
    out = {
        "sum": lambda: wide + wb,
        "prod": lambda: wide * wb,
        "min": lambda: torch.minimum(wide, wb),
        "max": lambda: torch.maximum(wide, wb),
        "band": lambda: wide & wb,
        "bor": lambda: wide | wb,
        "bxor": lambda: wide ^ wb,
    }[op]()
    return out.to(a.dtype)


def same(x, y):
    """Bit-equal, except that any NaN matches any NaN."""
    if x.dtype.is_floating_point:
        both_nan = torch.isnan(x) & torch.isnan(y)
        x, y = x.masked_fill(both_nan, 0), y.masked_fill(both_nan, 0)
        return torch.equal(x.view(_bits(x.dtype)), y.view(_bits(y.dtype)))
    return torch.equal(x, y)


def _bits(dtype):
    return {2: torch.int16, 4: torch.int32, 8: torch.int64}[torch.empty((), dtype=dtype).element_size()]
