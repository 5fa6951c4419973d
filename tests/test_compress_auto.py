"""compression="auto": every entry point takes it, every rank makes the same
choice from the same numbers, nothing a codec held back is lost whatever it
ran (the sums of all calls plus the residuals are the sums of all inputs,
against gloo), DDP under it keeps every rank's weights identical, and what
cannot run it is refused by name. The choice itself on slow and fast links,
the residual bound and drift: tests/cpp/test_auto_select.cc; on a slow
emulated link: tests/test_cluster.py."""

import pytest
import torch
from dist_helpers import ranks_log, run_ranks

from pyscalecomm import _C


def _direct_and_gloo(rank, n):
    import torch.distributed as dist

    import pyscalecomm

    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(rank)
    total_in = torch.zeros(1 << 21, dtype=torch.float64)
    total_out = torch.zeros(1 << 21, dtype=torch.float64)
    largest_sum = 0.0
    for _ in range(40):
        x = torch.randn(1 << 21)  # 8 MiB: on shared memory the exact sum beats every codec
        y = x.clone()
        pyscalecomm.allreduce(y, "auto", key="g")
        ref = x.clone()
        dist.all_reduce(ref, group=gloo)
        total_in += ref
        total_out += y
        largest_sum = max(largest_sum, float(ref.abs().max()))
    # Conservation across whatever auto ran: every call's sum plus what the
    # ranks' residuals still hold is the sum of every input.
    held = pyscalecomm.compress.state_dict()["g"]["residual"]
    held = torch.zeros(1 << 21) if held is None else held
    dist.all_reduce(held, group=gloo)
    lost = float((total_in - total_out - held.double()).abs().max())
    choices = pyscalecomm.compress.choices()
    # Per codec, over the algorithms the dense sum ran (the online tuner's
    # trials give "allreduce:<algorithm>:auto:none" one row per algorithm).
    calls = {}
    for s in pyscalecomm.stats():
        if ":auto:" in s["operation"]:
            codec = s["operation"].rsplit(":auto:", 1)[1]
            calls[codec] = calls.get(codec, 0) + s["calls"]
    operations = sorted(s["operation"] for s in pyscalecomm.stats() if ":auto" in s["operation"])
    every = [None] * n
    dist.all_gather_object(every, choices)
    return lost, float(total_in.abs().max()), largest_sum, choices, calls, every, operations


def test_auto_loses_nothing_whatever_it_ran_and_every_rank_agrees():
    for lost, total, largest_sum, choices, calls, every, operations in run_ranks(2, _direct_and_gloo):
        (c,) = choices
        assert c["key"] == "g" and c["choice"] in c["predicted_s"], c
        assert set(c["predicted_s"]) == {"none", "bf16", "topk:0.1", "topk:0.03", "topk:0.01"}
        assert "predicted" in c["reason"] and "GB/s" in c["reason"]
        assert all(e == every[0] for e in every)  # the same numbers and words, bit for bit, on every rank
        # stats say what ran, call by call (the first two calls run none)
        assert sum(calls.values()) == 40 and calls.get("none", 0) >= 2, (calls, operations)
        # a residual is read only where a codec ran (none holds none back)
        assert set(c["residual_ratio"]) <= set(calls) - {"none"}, (c["residual_ratio"], calls)
        # nothing a codec held back was lost: only bf16's rounding of the sum
        # itself (it sums in bf16), at most half a bf16 ulp per call that ran it
        assert lost <= 1e-5 * total + calls.get("bf16", 0) * 2**-8 * largest_sum, (lost, calls)


def _ddp(rank, n):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import pyscalecomm
    import pyscalecomm.hooks

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    ddp = DDP(model)
    ddp.register_comm_hook(None, pyscalecomm.hooks.compressed("auto"))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    teacher = torch.randn(64, 10, generator=torch.Generator().manual_seed(123))  # learnable labels
    losses = []
    for _ in range(40):
        x = torch.randn(16, 64, generator=g)
        y = (x @ teacher).argmax(1)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = [None] * n
    dist.all_gather_object(every, flat)
    return all(torch.equal(flat, e) for e in every), pyscalecomm.compress.choices(), losses


def test_ddp_under_auto_keeps_every_rank_identical_with_one_choice_per_bucket():
    out = run_ranks(2, _ddp)
    for same, choices, losses in out:
        assert same  # every rank applied the same averaged gradient
        assert choices and choices == out[0][1]
        assert all(c["key"].startswith("ddp-bucket-") for c in choices)
        # the hook passes its weights' shapes: PowerSGD is a candidate for every bucket
        # (and for no flat tensor: test_auto_loses_nothing_whatever_it_ran_and_every_rank_agrees)
        assert all("powersgd:4" in c["predicted_s"] for c in choices), choices
        assert sum(losses[-5:]) < sum(losses[:5])


def _group_default(rank, n):
    import torch.distributed as dist

    import pyscalecomm

    pg = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(compression="auto"))
    x = torch.full((1 << 20,), 1.0 + rank)
    y = torch.empty_like(
        x
    )  # one buffer, as DDP's buckets: its state (and auto's choice) lives with its storage
    for _ in range(4):  # auto decides at a key's fourth call
        y.copy_(x)
        dist.all_reduce(y, group=pg)
    small = torch.tensor([1.0, 2.0]) * (rank + 1)
    dist.all_reduce(small, group=pg)  # below compression_min_bytes: exact, not through auto
    return y[0].item(), small.tolist(), len(pyscalecomm.compress.choices(pg))


def test_the_group_default_takes_auto():
    for value, small, keys in run_ranks(2, _group_default):
        assert value == 3.0 and small == [3.0, 6.0] and keys == 1


def _refusals(rank, n):
    import torch.distributed as dist

    import pyscalecomm

    out = {}
    try:
        dist.new_group(
            backend="scalecomm", pg_options=pyscalecomm.Options(compression="auto", deterministic=1)
        )
        out["deterministic"] = "no error"
    except Exception as e:  # noqa: BLE001 - the message is the result
        out["deterministic"] = str(e)
    try:
        pyscalecomm.allreduce(torch.ones(4, dtype=torch.int32), "auto")
        out["int"] = "no error"
    except Exception as e:  # noqa: BLE001
        out["int"] = str(e)
    return out


def test_what_cannot_run_auto_is_refused_by_name():
    assert _C.codec_spec("auto") == "auto"
    for out in run_ranks(2, _refusals):
        assert "compression=auto" in out["deterministic"] and "name a codec" in out["deterministic"]
        assert "not floating point" in out["int"]


def test_the_driver_takes_auto_and_refuses_it_where_it_cannot_run():
    from pyscalecomm.train.config import Incompatible, RunConfig

    RunConfig(world=2, backend="scalecomm", compress="auto").check()
    with pytest.raises(Incompatible, match="compress=auto"):
        RunConfig(world=2, backend="scalecomm", compress="auto", device="cuda").check()
    with pytest.raises(ValueError, match="named codec"):
        RunConfig(world=2, backend="scalecomm", compress="auto", strategy="ps-sync").check()


def _decisions(rank, n):
    import pyscalecomm

    for i in range(33):
        y = torch.randn(1 << 16) + i
        pyscalecomm.allreduce(y, "auto", key="logged")
    return "ok"


def test_every_decision_is_logged_with_what_it_read_at_debug_level():
    # INFO logs the choices and changes; DEBUG also every decision that kept
    # the choice, and what each decision read: every candidate's time per
    # call and, where it ran, its step.
    lines = ranks_log(2, "test_compress_auto", "_decisions", {"SCALECOMM_DEBUG": "DEBUG"})
    read = [ln for ln in lines if "compress=auto at call" in ln and "read, per call: " in ln]
    calls = [int(ln.split("compress=auto at call ")[1].split()[0]) for ln in read]
    # the first decision, then every 16th call's
    assert 4 in calls and 16 in calls and 32 in calls, lines[-40:]
    assert all(ln.startswith("[scalecomm DEBUG") and "rank 0: " in ln for ln in read), read
    first = read[calls.index(4)]
    assert "(65536 elements)" in first and "none " in first and "bf16 " in first and "(step " in first, first
    said = [ln for ln in lines if "rank 0: compress=auto " in ln and " at call 16 of a key: " in ln]
    assert len(said) == 1 and ("keeps " in said[0] or "switches to " in said[0]), said
