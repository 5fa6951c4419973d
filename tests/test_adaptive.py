"""strategy=adaptive: the model's units, the plan's predicted cost, every
plan's gradient against one process's gradient of the whole batch (2 ranks
on scalecomm), and the driver's run with its plan in the report."""

import json
import os
import subprocess
import sys

import pytest
import torch
from dist_helpers import run_ranks

from pyscalecomm.train import adaptive, models, predict
from pyscalecomm.train.config import RunConfig, expand

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_units_follow_the_models_tensor_parallel_pairs():
    mlp = adaptive.units(models.build("mlp", (1, 8, 8), 10, 32))
    assert [(u.start, u.end, u.tp_keys) for u in mlp] == [(0, 5, ("1", "3")), (5, 6, ())]
    assert mlp[0].tp_pairs == ((64, 32),) and mlp[0].modes() == adaptive.MODES
    assert mlp[1].modes() == ("dp", "fsdp", "rep")  # the classifier has no pair
    tr = adaptive.units(models.build("transformer", (4, 8), 10, 16), tokens=4)
    assert [u.tp_keys for u in tr] == [(), ("1.linear1", "1.linear2"), ("2.linear1", "2.linear2"), ()]
    assert tr[1].tp_pairs == ((4 * 16, 4 * 16),)  # per token: width in, width out
    assert adaptive.whole_model(mlp) == {("dp", "dp"): "allreduce", ("tp", "rep"): "tp"}
    head = adaptive.units(models.build("cnn-fc", (1, 8, 8), 10, 8))  # convolutions, then a pair
    spans = [(u.start, u.end, u.tp_keys) for u in head]
    assert spans == [(0, 2, ()), (2, 6, ()), (6, 10, ("6", "8")), (10, 11, ())]
    # a pair's shards tile its features, differing by one at most
    assert [adaptive._shard_range(10, 4, r) for r in range(4)] == [(0, 3), (3, 3), (6, 2), (8, 2)]
    with pytest.raises(ValueError, match="nn.Sequential"):
        adaptive.units(torch.nn.Linear(2, 2))


def _profile():
    # An MLP whose pair holds 1 M parameters and hands on 64 floats a sample.
    return predict.Profile(
        batch=64,
        compute_s=0.02,
        layer_s=[0.0, 0.009, 0.0, 0.009, 0.0, 0.002],
        layer_params=[0, 500_000, 0, 500_000, 0, 650],
        act_bytes=[256, 4000, 4000, 256, 256, 40],
        tp_pairs=[(64, 64)],
        tp_params=1_000_000,
    )


def test_the_plan_follows_the_link_and_the_memory_cap():
    us = [
        adaptive.Unit(0, 5, "0-4", 1_000_000, ("1", "3"), 1_000_000, ((64, 64),)),
        adaptive.Unit(5, 6, "5", 650, (), 0, ()),
    ]
    prof = _profile()
    slow = predict.Link(60e-6, 1 / 125e6)  # 1 Gbit/s: 4 MB of gradient cost ~50 ms, activations ~0.1 ms
    ranked = adaptive.rank_plans(us, prof, slow, 4, 4, 256)
    assert ranked[0][0][0] == "tp"  # the pair tensor parallel
    free = predict.Link(1e-6, 1e-13)  # communication costs nothing: split the compute, never replicate it
    best = adaptive.rank_plans(us, prof, free, 4, 4, 256)[0]
    assert "rep" not in best[0] and best[1].comm_s < 1e-3
    dp = adaptive.cost(("dp", "dp"), us, prof, slow, 4, 4, 256)
    assert dp.comm_s == pytest.approx(predict._allreduce(4 * 1_000_650, 4, slow))
    assert dp.compute_s == pytest.approx(0.02 / 4)
    # The pair between units on shares: its input gathered and its gradient
    # reduce-scattered, its output reduce-scattered and its gradient gathered.
    sp = adaptive.cost(("tp", "dp"), us, prof, slow, 4, 4, 256)
    side = 4.0 * 64 * 64
    dp_sum = predict._allreduce(4 * 650, 4, slow)
    assert sp.comm_s == pytest.approx(4 * predict._gather(side, 4, slow) + dp_sum)
    # Before a replicated unit it hands on the whole batch (one allreduce), split again before the loss.
    whole = adaptive.cost(("tp", "rep"), us, prof, slow, 4, 4, 256)
    tail = predict._allreduce(side, 4, slow) + predict._gather(64 * 40, 4, slow)
    assert whole.comm_s == pytest.approx(2 * predict._gather(side, 4, slow) + tail)
    assert adaptive.cost(("dp", "dp"), us, prof, slow, 4, 2, 256).compute_s == pytest.approx(0.02 / 2)
    capped = adaptive.rank_plans(us, prof, slow, 4, 4, 256, max_state=4e6)  # 3 x 4 MB of dp state is over
    assert capped and all(c.state_bytes <= 4e6 for _, c in capped)
    assert ("dp", "dp") not in dict(capped)


PLANS = {
    "mlp": [("dp", "dp"), ("tp", "rep"), ("tp", "dp"), ("fsdp", "dp"), ("rep", "fsdp"), ("dp", "rep")],
    "cnn-fc": [
        ("dp", "dp", "tp", "dp"),  # the pair from shares to shares
        ("dp", "fsdp", "tp", "rep"),  # from shares to the whole batch
        ("rep", "rep", "tp", "dp"),  # from the whole batch to shares
        ("rep", "rep", "tp", "rep"),  # whole to whole
        ("rep", "dp", "dp", "dp"),
    ],
    "transformer": [
        ("dp", "dp", "dp", "dp"),
        ("rep", "tp", "tp", "rep"),
        ("dp", "tp", "dp", "fsdp"),
        ("fsdp", "dp", "tp", "dp"),
    ],
}


def _gradients_of_plans(rank, world, name):
    """Every plan's gradient on this rank's share against the whole batch's in one process."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    shape, tokens = ((4, 8), 4) if name == "transformer" else ((1, 8, 8), 1)
    torch.manual_seed(0)
    base = models.build(name, shape, 10, 16)
    x, y = torch.randn(4 * world, *shape), torch.randint(0, 10, (4 * world,))
    ref = {n: p.grad for n, p in _grads(base, x, y).named_parameters()}
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=(f"adaptive-{name}",))
    us = adaptive.units(base, tokens)
    share = slice(4 * rank, 4 * rank + 4)
    worst, layers = {}, {}
    for plan in PLANS[name]:
        model = models.build(name, shape, 10, 16)
        model.load_state_dict(base.state_dict())
        net, dp = adaptive.build_plan(plan, us, model, mesh)
        if isinstance(net, torch.nn.Sequential):
            names = [type(m).__name__ + f"({m.extra_repr()})" * hasattr(m, "group") for m in net]
            layers[",".join(plan)] = names
        net.zero_grad(set_to_none=True)
        adaptive.make_step(net, dp, mesh.get_group(), world)(x[share], y[share])
        err = 0.0
        for n, p in model.named_parameters():
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            r = ref[n].narrow(*p.tp_slice) if hasattr(p, "tp_slice") else ref[n]  # a shard of a pair
            err = max(err, float((g - r).abs().max() / r.abs().max().clamp_min(1e-12)))
        worst[",".join(plan)] = err
        with torch.no_grad():  # evaluation: every rank the whole set, no layout change
            assert net.eval()(x).shape == (4 * world, 10)
        net.train()
    dist.barrier()
    return worst, layers


def _grads(model, x, y):
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return model


@pytest.mark.parametrize("name", ["mlp", "cnn-fc", "transformer"])
def test_every_plan_computes_the_gradient_of_the_whole_batch(name):
    out = run_ranks(2, _gradients_of_plans, name, timeout_s=240)
    for plan, err in out[0][0].items():
        assert err < 1e-5, f"{name} plan {plan}: gradient off by {err:.2e} of its largest element"
    assert out[0][0].keys() == out[1][0].keys()
    if name == "cnn-fc":  # a pair between units on shares takes and gives shares: no layout change around it
        layers = out[0][1]["dp,dp,tp,dp"]
        assert not any(m.startswith("Layout") for m in layers), layers
        assert "ColumnShard(512 -> 32 of the outputs, from shares)" in layers, layers
        assert "RowShard(32 of the inputs -> 64, to shares)" in layers, layers
        assert out[0][1]["rep,rep,tp,rep"][-1] == "Layout(split)"  # whole to whole, split before the loss


def test_the_driver_trains_the_plan_with_ddps_loss_curve_and_reports_it(tmp_path):
    configs, _ = expand(RunConfig(world=2, strategy="adaptive"), [])
    assert configs[0].label().endswith("strategy=adaptive")
    with pytest.raises(ValueError, match="max_state_mb must be >= 0"):
        expand(RunConfig(world=2, strategy="adaptive", max_state_mb=-1), [])
    cmd = [sys.executable, "-m", "pyscalecomm.train", "--nproc", "2", "--sweep", "strategy=ddp,adaptive"]
    cmd += ["--width", "32", "--epochs", "2", "--steps", "4", "--batch-size", "8", "--no-plots"]
    cmd += ["--out-dir", str(tmp_path)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=420, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = json.load(open(tmp_path / "results.json"))["runs"]
    ddp = next(r for r in runs if r["config"]["strategy"] == "allreduce")
    ad = next(r for r in runs if r["config"]["strategy"] == "adaptive")
    assert [e["loss"] for e in ad["epochs"]] == pytest.approx([e["loss"] for e in ddp["epochs"]], rel=1e-4)
    info = ad["adaptive"]
    assert [u["mode"] for u in info["units"]] == info["chosen"].split(",")
    assert {c["whole_model"] for c in info["candidates"]} >= {"allreduce", "tp"}  # timed beside the plans
    chosen = next(c for c in info["candidates"] if c["plan"] == info["chosen"])
    assert chosen["measured_ms"] == min(c["measured_ms"] for c in info["candidates"])
    # a whole-model plan trains as that strategy: its own layout (tp: every rank the whole batch)
    layout = {"tp": [1, 2], "allreduce": [2, 1], None: [2, 1]}[chosen["whole_model"]]
    assert ad["mesh"] == layout
    assert "strategy=adaptive planned" in out.stdout and "the best whole-model strategy" in out.stdout
