"""Parallelism strategies in the driver: layouts, pipeline splits, tensor-parallel
plans, the predictor's formulas, and every strategy trained at 2 and 4 ranks
on scalecomm and gloo with the loss curve of DDP."""

import json
import os
import subprocess
import sys

import pytest

from pyscalecomm.train import models, predict, report, strategies
from pyscalecomm.train.config import Incompatible, RunConfig, expand

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_layouts_and_their_errors():
    assert strategies.mesh_shape("ddp", 4, "") == (4, 1)
    assert strategies.mesh_shape("fsdp", 4, "") == (4, 1)
    assert strategies.mesh_shape("tp", 4, "") == (1, 4) and strategies.mesh_shape("pp", 2, "") == (1, 2)
    assert strategies.mesh_shape("dp+tp", 4, "") == (2, 2) and strategies.mesh_shape("dp+pp", 6, "3x2") == (
        3,
        2,
    )
    with pytest.raises(ValueError, match="D x M must be the world"):
        strategies.mesh_shape("dp+tp", 4, "3x2")
    with pytest.raises(ValueError, match="give --mesh"):
        strategies.mesh_shape("dp+pp", 2, "")
    with pytest.raises(ValueError, match="is for the hybrid strategies"):
        strategies.mesh_shape("tp", 4, "2x2")
    assert RunConfig(strategy="ddp").strategy == "allreduce"  # one strategy, two names


def test_a_strategy_sweep_leaves_out_what_cannot_run_and_says_why():
    configs, skipped = expand(RunConfig(), ["world=1,2,4", "strategy=ddp,tp,dp+pp"])
    kept = [(c.world, c.strategy) for c in configs]
    assert kept == [(1, "allreduce"), (2, "allreduce"), (2, "tp"), (4, "allreduce"), (4, "tp"), (4, "dp+pp")]
    reasons = dict(skipped)
    assert "needs 2 or more ranks" in reasons["world=1 threads=1 backend=scalecomm compress=none strategy=tp"]
    assert any("give --mesh" in why for why in reasons.values())
    with pytest.raises(Incompatible, match="needs a tensor-parallel plan"):
        expand(RunConfig(world=2, strategy="tp", model="cnn"), [])
    with pytest.raises(ValueError, match="microbatches=3: must divide"):
        expand(RunConfig(world=2, strategy="pp", microbatches=3), [])
    with pytest.raises(ValueError, match="strategy 'zero'"):
        expand(RunConfig(world=2, strategy="zero"), [])


def test_pipeline_split_minimises_the_largest_stage():
    assert strategies.pp_split_sizes([0, 66560, 0, 1049600, 0, 10250], 2) == [(0, 3), (3, 6)]
    assert strategies.pp_split_sizes([5, 5, 5, 5], 2) == [(0, 2), (2, 4)]
    assert strategies.pp_split_sizes([1, 1, 1], 3) == [(0, 1), (1, 2), (2, 3)]
    assert strategies.pp_split_sizes([10, 1, 1, 10], 2) == [(0, 2), (2, 4)]
    with pytest.raises(ValueError, match="too few for 5 pipeline stages"):
        strategies.pp_split_sizes([1, 1], 5)


def test_tensor_parallel_plans():
    mlp = models.build("mlp", (1, 8, 8), 10, 32)
    assert set(strategies.tp_plan(mlp)) == {"1", "3"}  # the classifier stays whole
    tr = models.build("transformer", (8, 8), 10, 32)
    assert set(strategies.tp_plan(tr)) == {f"{i}.{n}" for i in (1, 2) for n in ("linear1", "linear2")}
    assert strategies.tp_plan(models.build("cnn", (1, 8, 8), 10, 8)) is None


def _profile(params=(0, 1000, 0, 1000, 0, 10), act=(256, 400, 400, 400, 400, 40)):
    return predict.Profile(
        batch=64,
        compute_s=0.012,
        layer_s=[0.0, 0.005, 0.0, 0.005, 0.0, 0.002],
        layer_params=list(params),
        act_bytes=list(act),
        tp_pairs=[(64, 100)],
        tp_params=2000,
    )


def test_the_predictors_formulas():
    prof, link = _profile(), predict.Link(alpha=1e-4, beta=1e-8)
    p = prof.params * 4  # bytes of parameters
    ddp = predict.predict("ddp", 4, (4, 1), prof, link, cores=8)
    assert ddp.compute_s == pytest.approx(0.012 / 4)
    assert ddp.comm_s == pytest.approx(2 * 3 * 1e-4 + 2 * 3 / 4 * p * 1e-8)  # ring allreduce
    assert ddp.state_bytes == 3 * p
    fsdp = predict.predict("fsdp", 4, (4, 1), prof, link, cores=8)
    assert fsdp.state_bytes == 3 * p // 4  # sharded parameters, gradients and momentum
    assert fsdp.comm_s == pytest.approx(
        3 * (3 * 3 * 1e-4 + 3 / 4 * p * 1e-8)
    )  # 3 units, 2 gathers + 1 scatter
    tp = predict.predict("tp", 4, (1, 4), prof, link, cores=8)
    one = lambda n: 2 * 3 * 1e-4 + 2 * 3 / 4 * n * 1e-8  # noqa: E731
    assert tp.comm_s == pytest.approx(one(4 * 64 * 64) + one(4 * 64 * 100))
    pp = predict.predict("pp", 2, (1, 2), prof, link, cores=8, microbatches=4)
    # stages [0,3) and [3,6): 5 ms and 7 ms; 4 + 1 slots of the slowest stage's microbatch and its messages
    slot = 0.007 / 4 + 2 * (1e-4 + 400 * 16 * 1e-8)
    assert pp.step_s == pytest.approx(5 * slot)
    # oversubscribed: 4 ranks on 2 cores compute twice as long; the machinery's time too
    slow = predict.predict("ddp", 4, (4, 1), prof, link, cores=2, overhead={"allreduce": 0.001})
    assert slow.compute_s == pytest.approx(2 * 0.012 / 4 + 2 * 0.001)


def test_prediction_verdict_names_hits_and_misses():
    def run(strategy, t, pred):
        cfg = RunConfig(world=4, strategy=strategy)
        return {
            "config": cfg.__dict__.copy(),
            "label": cfg.label(),
            "time_per_epoch_s": t,
            "predicted": {"step_s": pred},
        }

    runs = [run("allreduce", 1.0, 0.002), run("pp", 0.5, 0.003)]
    assert report.prediction_verdict(runs) == (
        "world=4 backend=scalecomm: predicted allreduce, measured pp 1f1b/4 fastest "
        "(allreduce 2.00x its time per epoch): miss"
    )
    runs[1]["predicted"]["step_s"] = 0.001
    assert report.prediction_verdict(runs).endswith("measured pp 1f1b/4 fastest: hit")


def _train(args, tmp_path, timeout=420):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "pyscalecomm.train", "--out-dir", str(tmp_path / "out"), "--no-plots", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def _runs(tmp_path):
    with open(tmp_path / "out" / "results.json") as f:
        return json.load(f)["runs"]


@pytest.mark.parametrize(
    "world,sweep",
    [
        (2, "strategy=ddp,fsdp,tp,pp"),
        # slow: the 2-D meshes train only here (their shapes are unit-tested above)
        pytest.param(4, "strategy=ddp,dp+tp,dp+pp", marks=pytest.mark.slow),
    ],
    ids=["2 ranks", "4 ranks, 2-D meshes"],
)
def test_every_strategy_trains_on_both_backends_with_ddps_loss_curve(tmp_path, world, sweep):
    args = ["--nproc", str(world), "--sweep", sweep, "backend=gloo,scalecomm"]
    out = _train([*args, "--width", "32", "--epochs", "2", "--steps", "4", "--batch-size", "8"], tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = _runs(tmp_path)
    strategies_run = {r["config"]["strategy"] for r in runs}
    assert len(runs) == 2 * len(strategies_run) == 2 * len(sweep.split(","))
    ddp = next(r for r in runs if r["config"]["strategy"] == "allreduce" and r["config"]["backend"] == "gloo")
    for r in runs:  # the same global batch in the same order: the same math
        losses = [e["loss"] for e in r["epochs"]]
        assert losses == pytest.approx([e["loss"] for e in ddp["epochs"]], rel=1e-4), r["label"]
        assert r["final_acc"] == pytest.approx(ddp["final_acc"], abs=0.01), r["label"]
        assert r["predicted"]["step_s"] > 0 and r["state_mib"] > 0
    assert "# predicted before running" in out.stdout and "Predicted against measured" in out.stdout
    pp = [r for r in runs if "pp" in r["config"]["strategy"]]
    assert all(r["bubble"] > 0 for r in pp)
    sharded = [r for r in runs if r["config"]["strategy"] in ("fsdp", "dp+tp")]
    assert all(r["state_mib"] < ddp["state_mib"] for r in sharded)


def test_strategies_run_one_after_another_under_torchrun(tmp_path):
    # The job's ranks run every configuration in turn, each on groups of its
    # own that are destroyed after it: the same mesh strategy on a second
    # backend must get a mesh (and groups) of its own, not reach the first
    # run's destroyed ones through PyTorch's mesh-keyed caches. The
    # prediction's child job must not join torchrun's.
    from dist_helpers import free_port

    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
    ]
    cmd += ["-m", "pyscalecomm.train", "--out-dir", str(tmp_path / "out"), "--no-plots"]
    cmd += ["--sweep", "strategy=ddp,tp,pp", "backend=gloo,scalecomm"]
    cmd += ["--width", "32", "--epochs", "1", "--steps", "3", "--batch-size", "8"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "# predicted before running" in out.stdout
    runs = _runs(tmp_path)
    done = [(r["config"]["strategy"], r["config"]["backend"]) for r in runs]
    assert sorted(done) == sorted((s, b) for s in ("allreduce", "tp", "pp") for b in ("gloo", "scalecomm"))
    for r in runs:  # each run's groups ran on its own backend
        assert r["group_backends"] == [r["config"]["backend"]], (r["label"], r["group_backends"])
    by = {(r["config"]["strategy"], r["config"]["backend"]): r["final_loss"] for r in runs}
    for strategy in ("allreduce", "tp", "pp"):  # same math on both backends
        assert by[(strategy, "gloo")] == pytest.approx(by[(strategy, "scalecomm")], abs=1e-4)
