"""Property test: random argument combinations thrown at every collective.

Hypothesis draws a batch of cases (collective, dtype, count, root, op, split
sizes, output sizes), valid or not; every rank runs the same batch on one
group. Each case must end in the exact result or a clear error raised on the
caller before anything is sent (ValueError / RuntimeError naming the
collective) after which the group still works: never a crash, a hang or
wrong data.
"""

import torch
import torch.distributed as dist
from dist_helpers import run_ranks
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

N = 3
KINDS = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all_single", "gather"]
KINDS += ["scatter"]
DTYPES = ["float32", "float64", "int32", "int64", "bfloat16", "uint8"]
OPS = ["SUM", "MAX", "MIN", "PRODUCT", "AVG"]


@st.composite
def case(draw):
    kind = draw(st.sampled_from(KINDS))
    c = {
        "kind": kind,
        "dtype": draw(st.sampled_from(DTYPES)),
        "count": draw(st.sampled_from([0, 1, 2, 3, 7, 64, 1000])),
        # Mostly valid roots, sometimes out of range (the same on every rank).
        "root": draw(st.one_of(st.integers(0, N - 1), st.sampled_from([-1, N, 2**31, -(2**40)]))),
        "op": draw(st.sampled_from(OPS)),
        # Output size off by this many elements (0: right). Only where every
        # rank checks the same shapes: a root whose inputs disagree with the
        # other ranks' outputs is an argument mismatch across ranks (caught on
        # the wire, like mismatched counts), not a local error.
        "out_delta": draw(st.sampled_from([0, 0, 0, -1, 1])) if kind not in ("gather", "scatter") else 0,
    }
    if kind == "all_to_all_single":
        rows = c["count"]
        if draw(st.booleans()):
            splits = None  # even split (needs rows % N == 0)
        else:
            splits = draw(st.lists(st.integers(-3, rows + 3), min_size=N, max_size=N))
            # Every rank passes these as its input and its output splits. Uneven
            # ones that are locally valid disagree across ranks (rank q sends
            # splits[p] rows to p, which expects splits[q] from q): a mismatch
            # caught on the wire, like mismatched counts, not a local error.
            if min(splits) >= 0 and sum(splits) == rows and len(set(splits)) > 1:
                splits = None
        c["splits"] = splits
    return c


def _value(rank, i, dtype):
    return ((i * 7 + rank * 3) % 5 + 1).to(dtype)


def _reduce(values, op):
    x = torch.stack([v.double() for v in values])
    if op == "SUM":
        return x.sum(0)
    if op == "MAX":
        return x.max(0).values
    if op == "MIN":
        return x.min(0).values
    if op == "PRODUCT":
        return x.prod(0)
    return x.mean(0)  # AVG


def _expected(rank, n, c):
    """The closed-form result of a valid case on this rank (float64)."""
    count, root, k = c["count"], c["root"], c["kind"]
    idx = torch.arange(count)
    v = [_value(r, idx, torch.float64) for r in range(n)]
    if k == "all_reduce":
        return _reduce(v, c["op"])
    if k == "broadcast":
        return v[root]
    if k == "reduce":
        return _reduce(v, c["op"]) if rank == root else torch.zeros(0)
    if k in ("all_gather", "gather"):
        return torch.cat(v) if (k == "all_gather" or rank == root) else torch.zeros(0)
    if k == "reduce_scatter":
        full = [_value(r, torch.arange(n * count), torch.float64) for r in range(n)]
        return _reduce([f[rank * count : (rank + 1) * count] for f in full], c["op"])
    if k == "all_to_all_single":
        splits = c["splits"] or [count // n] * n
        offsets = [sum(splits[:q]) for q in range(n)]
        return torch.cat([v[src][offsets[rank] : offsets[rank] + splits[rank]] for src in range(n)])
    return v[rank]  # scatter


def _run_case(rank, n, c):
    """Runs one case; returns "exact", the error text, or "WRONG ..."."""
    dtype = getattr(torch, c["dtype"])
    count, root = c["count"], c["root"]
    op = getattr(dist.ReduceOp, c["op"])
    idx = torch.arange(count)
    k = c["kind"]
    try:
        if k == "all_reduce":
            got = _value(rank, idx, dtype)
            dist.all_reduce(got, op=op)
        elif k == "broadcast":
            got = _value(rank, idx, dtype)
            dist.broadcast(got, src=root)
        elif k == "reduce":
            got = _value(rank, idx, dtype)
            dist.reduce(got, dst=root, op=op)
            if rank != root:
                got = torch.zeros(0)
        elif k == "all_gather":
            got = torch.zeros(max(n * count + c["out_delta"], 0), dtype=dtype)
            dist.all_gather_into_tensor(got, _value(rank, idx, dtype))
        elif k == "reduce_scatter":
            got = torch.zeros(max(count + c["out_delta"], 0), dtype=dtype)
            dist.reduce_scatter_tensor(got, _value(rank, torch.arange(n * count), dtype), op=op)
        elif k == "all_to_all_single":
            got = torch.zeros(max(count + c["out_delta"], 0), dtype=dtype)
            splits = c["splits"]
            dist.all_to_all_single(
                got, _value(rank, idx, dtype), output_split_sizes=splits, input_split_sizes=splits
            )
        elif k == "gather":
            out = [torch.zeros(count, dtype=dtype) for _ in range(n)] if rank == root else None
            dist.gather(_value(rank, idx, dtype), out, dst=root)
            got = torch.cat(out) if out else torch.zeros(0)
        else:  # scatter
            got = torch.zeros(max(count + c["out_delta"], 0), dtype=dtype)
            parts = [_value(r, idx, dtype) for r in range(n)] if rank == root else None
            dist.scatter(got, parts, src=root)
    except (ValueError, RuntimeError, TypeError, IndexError) as e:
        return f"{type(e).__name__}: {e}"
    if k in ("broadcast", "reduce", "gather", "scatter") and not 0 <= root < n:
        return f"WRONG: accepted root {root}"
    want = _expected(rank, n, c).to(dtype)  # the result's own precision and integer rounding
    if dtype.is_floating_point:
        ok = got.shape == want.shape and torch.allclose(got.double(), want.double(), rtol=1e-2, atol=1e-2)
    else:
        ok = torch.equal(got, want)
    return "exact" if ok else f"WRONG: {got[:8].tolist()} want {want[:8].tolist()}"


def _run_cases(rank, n, cases):
    outcomes = []
    for c in cases:
        outcomes.append(_run_case(rank, n, c))
        # After an error the group must still work, with nothing left over.
        t = torch.full((5,), float(rank + 1))
        try:
            dist.all_reduce(t)
        except Exception as e:
            raise AssertionError(f"the group broke after {c}: this rank saw {outcomes[-1]!r}") from e
        assert t.tolist() == [float(n * (n + 1) // 2)] * 5, (c, outcomes[-1], t)
    return outcomes


# A case that crashed both ranks before splits were checked: negative splits
# that still sum to the row count.
_NEGATIVE_SPLITS = {"kind": "all_to_all_single", "dtype": "float32", "count": 3, "root": 0, "op": "SUM"}
_NEGATIVE_SPLITS |= {"out_delta": 0, "splits": [-1, 2, 2]}


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(case(), min_size=12, max_size=12))
@example([_NEGATIVE_SPLITS])
def test_random_arguments_give_the_exact_result_or_a_clear_error(cases):
    out = run_ranks(N, _run_cases, cases, timeout_s=120, group_timeout_s=20)
    for c, *per_rank in zip(cases, *out, strict=True):
        for r, outcome in enumerate(per_rank):
            assert not outcome.startswith("WRONG"), (c, r, outcome)
            if outcome != "exact":
                assert "scalecomm" in outcome or "split" in outcome or "Tensor" in outcome, (c, r, outcome)
        # Errors are decided from the arguments alone, which every rank shares.
        kinds = {o == "exact" for o in per_rank}
        assert len(kinds) == 1, (c, per_rank)
