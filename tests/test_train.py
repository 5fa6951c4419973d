"""The training driver: config grid, derived metrics, models, a smoke sweep
with every output, loss-curve parity of gloo and scalecomm, and launches
under torchrun and mpirun."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import torch
from dist_helpers import free_port

import pyscalecomm
from pyscalecomm.train import models, report
from pyscalecomm.train.config import RunConfig, expand, parse_sweep
from pyscalecomm.train.data import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    drop = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _train(args, tmp_path, prefix=(), timeout=300):
    cmd = [*prefix, sys.executable, "-m", "pyscalecomm.train", "--out-dir", str(tmp_path / "out"), *args]
    return subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=timeout)


def test_sweep_grid_is_the_product_in_order_and_names_bad_keys():
    assert parse_sweep(["world=1,2", "compress=none,topk:0.01"]) == [
        {"world": 1, "compress": "none"},
        {"world": 1, "compress": "topk:0.01"},
        {"world": 2, "compress": "none"},
        {"world": 2, "compress": "topk:0.01"},
    ]
    with pytest.raises(ValueError, match="unknown sweep key 'wrld'"):
        parse_sweep(["wrld=1"])
    with pytest.raises(ValueError, match="world='two': expected int"):
        parse_sweep(["world=two"])
    configs, skipped = expand(RunConfig(), ["backend=gloo,scalecomm", "compress=none,topk:0.01"])
    assert [(c.backend, c.compress) for c in configs] == [
        ("gloo", "none"),
        ("scalecomm", "none"),
        ("scalecomm", "topk:0.01"),
    ]
    assert len(skipped) == 1 and "needs backend=scalecomm" in skipped[0][1]
    with pytest.raises(ValueError, match="needs backend=scalecomm"):  # a single run is not skipped
        expand(RunConfig(backend="gloo", compress="sign"), [])
    with pytest.raises(ValueError, match="--device cuda"):
        expand(RunConfig(backend="nccl"), [])
    with pytest.raises(ValueError, match="bucket_mb must be >= 0"):
        expand(RunConfig(), ["bucket_mb=0,-1"])
    # an unknown or incomplete codec is refused here, in the parent, naming the choices
    with pytest.raises(ValueError, match="compress=topkk:0.01: scalecomm: unknown compression"):
        expand(RunConfig(backend="scalecomm"), ["compress=none,topkk:0.01"])
    with pytest.raises(ValueError, match="give the fraction of values kept"):
        expand(RunConfig(backend="scalecomm", compress="topk"), [])
    assert RunConfig().bucket_mb == 0  # DDP's own default buckets unless asked


def test_a_key_that_a_strategy_does_not_use_makes_no_copies_of_its_run():
    configs, skipped = expand(RunConfig(world=4), ["ps_servers=1,2", "strategy=ddp,ps-ssp:4"])
    assert [(c.strategy, c.ps_servers) for c in configs] == [
        ("allreduce", 1),
        ("ps-ssp:4", 1),
        ("ps-ssp:4", 2),
    ]
    configs, skipped = expand(RunConfig(world=4), ["mesh=2x2,4x1", "strategy=ddp,dp+pp"])
    assert [(c.strategy, c.mesh) for c in configs] == [("allreduce", ""), ("dp+pp", "2x2"), ("dp+pp", "4x1")]
    assert not skipped
    with pytest.raises(ValueError, match="is for the hybrid strategies"):  # a single run is not changed
        expand(RunConfig(world=4, mesh="2x2"), [])


def test_a_sweep_axis_over_several_keys_lists_their_points_not_the_product():
    assert parse_sweep(["world=2", "backend/compress=gloo/none,scalecomm/topk:0.01"]) == [
        {"world": 2, "backend": "gloo", "compress": "none"},
        {"world": 2, "backend": "scalecomm", "compress": "topk:0.01"},
    ]
    with pytest.raises(ValueError, match="gives 1 value.*for the 2 keys backend/compress"):
        parse_sweep(["backend/compress=gloo"])
    with pytest.raises(ValueError, match="world='x': expected int"):
        parse_sweep(["backend/world=gloo/x"])


def _run(world, backend="gloo", compress="none", threads=1, t=1.0, accs=(0.5, 0.9), **setting):
    cfg = RunConfig(world=world, backend=backend, compress=compress, threads=threads, **setting)
    epochs = [
        {"epoch": i + 1, "time_s": t, "cum_time_s": t * (i + 1), "loss": 1.0, "test_loss": 1.0, "acc": a}
        for i, a in enumerate(accs)
    ]
    return {
        "config": cfg.__dict__.copy(),
        "label": cfg.label(),
        "time_per_epoch_s": t,
        "samples_per_s": 100 / t,
        "comm_share": 0.5,
        "step_ms": 10.0,
        "compute_ms": 5.0,
        "exposed_comm_ms": 5.0,
        "peak_mem_mib": 100.0,
        "cpu_util": 1.0,
        "final_loss": 1.0,
        "final_acc": accs[-1],
        "epochs": epochs,
    }


def test_derived_metrics_follow_their_definitions():
    runs = [
        _run(1, t=8.0),
        _run(4, t=4.0, accs=(0.5, 0.9)),
        _run(4, "scalecomm", t=2.0, accs=(0.5, 0.9)),
        _run(4, "scalecomm", "topk:0.01", t=1.0, accs=(0.897, 0.91)),
        _run(1, "scalecomm", t=8.0),
        _run(1, "scalecomm", "topk:0.01", t=8.0),
        _run(1, threads=4, t=3.0),
    ]
    report.derive(runs)
    base1, gloo4, sc4, topk4, _, _, vert = runs
    assert gloo4["speedup"] == 2.0 and gloo4["efficiency"] == 0.5
    assert sc4["speedup"] == 4.0 and sc4["efficiency"] == 1.0 and sc4["vs_baseline"] == 2.0
    assert vert["speedup"] == pytest.approx(8 / 3) and vert["efficiency"] == pytest.approx(8 / 3 / 4)
    assert topk4["acc_delta"] == pytest.approx(1.0)
    # target = 0.9 - 0.005: topk reaches it after its first epoch (1 s), gloo after its second (8 s)
    assert topk4["time_to_target_s"] == 1.0 and topk4["sooner"] == 8.0
    assert gloo4["sooner"] == 1.0 and base1["vs_baseline"] == 1.0
    fits = {(f["backend"], f["compress"]): f for f in report.fit(runs)}
    assert fits[("gloo", "none")]["t_comm_s"] == pytest.approx(4.0 - 8.0 / 4)
    assert fits[("scalecomm", "none")]["points"][1]["predicted_s"] == pytest.approx(2.0)
    table = report.markdown_table(runs)
    assert table.count("\n") == len(runs) + 1 and "| 8.00x |" in table
    assert "| 4 | gloo | none | 4.000 | 3.000 | 0.75x |" in report.scaling_table(runs)
    story = report.verdict(runs).splitlines()
    # one line per run with a baseline other than itself, naming runs by what differs, then the
    # headroom of each baseline of several ranks (its step against its compute alone)
    assert len(story) == 5
    assert story[-1] == (
        "world=4 threads=1 backend=gloo compress=none: 50 % of its 10.0 ms step is exposed communication "
        "(compute alone 5.0 ms); a step of its compute alone would run 2.00x its speed: about the most any "
        "backend or codec can gain here"
    )
    assert story[1] == (
        "world=4 threads=1 backend=scalecomm compress=topk:0.01: 4.00x the speed of world=4 threads=1 "
        "backend=gloo compress=none per epoch, accuracy +1.0 points, at its accuracy 8.00x sooner"
    )


def test_runs_are_compared_only_with_runs_of_the_same_setting():
    # A sweep over lr: each scalecomm run's baseline and 1-rank reference have its lr.
    runs = [_run(w, b, t=t, lr=lr) for lr in (0.1, 0.01) for w, b, t in ((1, "gloo", 8.0), (2, "gloo", 4.0))]
    runs += [
        _run(w, "scalecomm", t=t, lr=lr)
        for lr, t2 in ((0.1, 2.0), (0.01, 1.0))
        for w, t in ((1, 8.0), (2, t2))
    ]
    report.derive(runs)
    sc2 = [r for r in runs if r["config"]["backend"] == "scalecomm" and r["config"]["world"] == 2]
    assert [r["vs_baseline"] for r in sc2] == [2.0, 4.0] and [r["speedup"] for r in sc2] == [4.0, 8.0]
    table = report.markdown_table(runs)
    assert "| setting |" in table and "| lr=0.01 |" in table and "| lr=0.1 |" in table
    fits = report.fit(runs)
    assert len(fits) == 4 and {f["setting"] for f in fits} == {"lr=0.1", "lr=0.01"}
    assert "gloo (lr=0.1)" in report.fit_table(fits)
    assert "| setting |" not in report.markdown_table(runs[:2])  # nothing varies: no column
    # The story names each run's own baseline, at its lr (the runs of a setting share labels).
    story = [s for s in report.verdict(runs).splitlines() if s.startswith("world=2 backend=scalecomm")]
    for line, lr, ratio in zip(story, ("0.1", "0.01"), ("2.00x", "4.00x"), strict=True):
        want = f"world=2 backend=scalecomm lr={lr}: {ratio} the speed of world=2 backend=gloo lr={lr} "
        assert line.startswith(want), line


def test_repeats_fold_into_the_median_run_and_pair_with_the_baseline():
    # Repeat r of each configuration ran next to repeat r of the others: a slow
    # repeat 1 slows both backends, and the paired ratio sees through it.
    times = {"gloo": (4.0, 8.0, 4.2), "scalecomm": (2.0, 4.0, 2.0)}
    runs = [dict(_run(2, b, t=t), repeat=k) for b in times for k, t in enumerate(times[b])]
    runs = report.aggregate(runs[::-1])  # any order in, repeat order out
    report.derive(runs)
    gloo, sc = sorted(runs, key=lambda r: r["config"]["backend"])
    assert gloo["repeats"] == 3 and gloo["time_per_epoch_runs"] == [4.0, 8.0, 4.2]
    assert gloo["time_per_epoch_s"] == 4.2 and sc["time_per_epoch_s"] == 2.0  # median runs
    assert sc["vs_baseline"] == 2.0 and sc["vs_baseline_range"] == [2.0, 2.1]  # ratios 2.0, 2.0, 2.1
    assert gloo["vs_baseline_range"] == [1.0, 1.0]
    table = report.markdown_table(runs)
    assert "| 2.000 [2.00-4.00] |" in table and "| 2.00x [2.00-2.10] |" in table
    # A repeat that failed on one side: only repeats both have are paired.
    solo = report.aggregate([dict(_run(2, "gloo", t=4.0), repeat=0), dict(_run(2, "gloo", t=5.0), repeat=1)])
    solo += report.aggregate([dict(_run(2, "scalecomm", t=2.5), repeat=1)])
    report.derive(solo)
    assert solo[1]["vs_baseline"] == 4.0 / 2.5 and solo[1]["vs_baseline_range"] is None
    assert "[" not in report.markdown_table(solo[1:])  # one run: no spread shown


@pytest.mark.parametrize("name", models.MODELS)
@pytest.mark.parametrize("data", ["digits", "synthetic"])
def test_every_model_trains_a_step_on_each_data_set(name, data):
    d = load(data, name, samples=16)
    m = models.build(name, d.input_shape, d.classes, 16)
    loss = torch.nn.functional.cross_entropy(m(d.train_x[:4]), d.train_y[:4])
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())
    assert models.param_bytes(m) == 4 * sum(p.numel() for p in m.parameters())
    assert d.real == (data == "digits")


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])  # resnet at width 256: minutes per step here
def test_every_model_trains_at_the_drivers_defaults(name):
    # The driver's defaults (width 256, SGD lr 0.05, momentum 0.9, global
    # batch 64 at 2 ranks) must train the models: a pre-norm transformer
    # without its final norm reached NaN here within 20 steps.
    cfg = RunConfig(model=name)
    torch.manual_seed(0)
    d = load("digits", name)
    m = models.build(name, d.input_shape, d.classes, cfg.width)
    opt = torch.optim.SGD(m.parameters(), lr=cfg.lr, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(50):
        idx = torch.randint(0, len(d.train_x), (2 * cfg.batch_size,), generator=g)
        loss = torch.nn.functional.cross_entropy(m(d.train_x[idx]), d.train_y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses), losses
    assert sum(losses[-5:]) / 5 < losses[0]


def test_a_run_whose_loss_is_not_finite_is_named_as_diverged():
    runs = [_run(1, "gloo"), _run(2, "scalecomm")]
    runs[1]["epochs"][-1]["loss"] = float("nan")
    text = report.diverged(runs)
    assert "diverged" in text and "--lr" in text and "scalecomm" in text and "gloo" not in text
    assert report.diverged(runs[:1]) == ""


def test_a_run_that_ends_while_auto_measures_says_its_times_include_the_trials():
    runs = [_run(2, "gloo"), _run(2, "scalecomm"), _run(4, "scalecomm")]
    runs[1]["auto"] = {"exploring_bytes": [524288, 8388608], "trial_calls": 12, "calls": 220}
    runs[2]["auto"] = {"exploring_bytes": [], "trial_calls": 40, "calls": 5000}
    text = report.still_measuring(runs)
    assert text.count("\n") == 0 and runs[1]["label"] in text, text
    assert "up to 512 KiB, 8 MiB" in text and "12 of its 220 calls were trials" in text, text
    assert "python -m pyscalecomm.tune" in text and "SCALECOMM_TUNING_FILE" in text, text
    assert report.still_measuring(runs[:1]) == ""


def test_compress_auto_reports_its_choice_per_bucket_and_why(tmp_path):
    args = ["--sweep", "world=2", "backend=scalecomm", "compress=auto", "--epochs", "2", "--steps", "6"]
    p = _train([*args, "--width", "256", "--no-plots"], tmp_path)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert "compress=auto chose, per DDP bucket (the same on every rank):" in p.stdout, p.stdout[-3000:]
    line = r"  bucket 0 \([0-9.]+ MiB\): (none|bf16|topk:[0-9.]+) because predicted "
    assert re.search(line, p.stdout), p.stdout
    (run,) = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert run["compression_choices"] and run["compression_choices"][0]["key"] == "ddp-bucket-0"


def test_grad_clock_stamps_the_last_gradient_of_a_backward():
    from pyscalecomm.train import worker

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    clock = worker.GradClock(model)
    start = time.perf_counter()
    model(torch.randn(4, 8)).sum().backward()
    after = time.perf_counter()
    clock.lap(start)
    assert clock.laps and 0 < clock.laps[0] <= after - start
    clock.remove()
    clock.lap(after)  # nothing stamped after the hooks left
    model(torch.randn(4, 8)).sum().backward()
    clock.lap(after)
    assert len(clock.laps) == 1
    # the slowest rank's median against the calibration's; not timed: None
    laps = [{"compute_in_step_s": 0.012}, {"compute_in_step_s": 0.015}]
    assert worker._slowdown(laps, 0.010) == pytest.approx(0.5)
    assert worker._slowdown([{"compute_in_step_s": None}], 0.010) is None


def test_resnet_at_width_64_has_resnet18s_size():
    m = models.build("resnet", (3, 32, 32), 10, 64)
    assert 11.0e6 < sum(p.numel() for p in m.parameters()) < 11.3e6


def test_smoke_sweep_writes_every_output_and_backends_share_a_loss_curve(tmp_path):
    args = ["--sweep", "world=1,2", "backend=gloo,scalecomm", "--epochs", "3", "--steps", "4"]
    args += ["--width", "32"]
    p = _train(args, tmp_path)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    out = tmp_path / "out"
    for name in ("results.json", "speedup.png", "breakdown.png", "accuracy.png"):
        assert (out / name).stat().st_size > 0, name
    assert "| world | threads | backend |" in p.stdout and "T_N = T_1/N + T_comm" in p.stdout
    assert "| compute +% |" in p.stdout
    assert "[4/4] world=2 threads=1 backend=scalecomm compress=none" in p.stdout  # progress
    doc = json.loads((out / "results.json").read_text())
    runs = {(r["config"]["world"], r["config"]["backend"]): r for r in doc["runs"]}
    assert len(runs) == 4 and len(doc["fits"]) == 2
    for r in runs.values():
        w = r["config"]["world"]
        assert r["efficiency"] == pytest.approx(r["speedup"] / w)
        assert r["samples_per_s"] == pytest.approx(4 * 32 * w / r["time_per_epoch_s"])
        assert 0 <= r["comm_share"] < 1 and r["step_ms"] >= r["exposed_comm_ms"] >= 0
        # DDP on the CPU: the backward's own time inside a step, over its time alone
        assert r["compute_slowdown"] is not None and -0.9 < r["compute_slowdown"] < 50, r["compute_slowdown"]
        assert all(0 <= e["acc"] <= 1 for e in r["epochs"]) and len(r["epochs"]) == 3
        assert r["peak_mem_mib"] > 0 and r["cpu_util"] > 0 and r["grad_bytes"] > 0
    assert runs[(1, "gloo")]["speedup"] == 1.0
    # 12 steps end inside auto's first exploration (its budget keeps the
    # model's choice running): the report says the times include its trials.
    auto = runs[(2, "scalecomm")]["auto"]
    assert auto["exploring_bytes"] and 0 <= auto["trial_calls"] < auto["calls"], auto
    assert runs[(1, "scalecomm")]["auto"] is None and runs[(2, "gloo")]["auto"] is None
    label = runs[(2, "scalecomm")]["label"]
    assert f"{label}: auto was still measuring allreduces" in p.stdout, p.stdout
    for w in (1, 2):  # same data order, same initial weights: the same loss curve
        g, s = runs[(w, "gloo")], runs[(w, "scalecomm")]
        assert [e["loss"] for e in s["epochs"]] == pytest.approx([e["loss"] for e in g["epochs"]], rel=1e-5)
        assert s["final_acc"] == pytest.approx(g["final_acc"], abs=1e-6)


@pytest.mark.slow  # the parameter server itself: tests/test_ps.py
def test_parameter_server_strategies_run_in_the_driver_against_allreduce(tmp_path):
    args = ["--nproc", "3", "--epochs", "2", "--steps", "4", "--width", "32", "--straggler", "random:3"]
    args += ["--sweep", "strategy=allreduce,ps-sync,ps-ssp:1"]
    p = _train(args, tmp_path)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert "| strategy |" in p.stdout and "staleness mean/max" in p.stdout
    assert (tmp_path / "out" / "staleness.png").stat().st_size > 0
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    runs = {r["config"]["strategy"]: r for r in doc["runs"]}
    ar, sync, ssp = runs["allreduce"], runs["ps-sync"], runs["ps-ssp:1"]
    # The same math as synchronous allreduce SGD: the same loss curve.
    assert [e["loss"] for e in sync["epochs"]] == pytest.approx([e["loss"] for e in ar["epochs"]], rel=1e-4)
    assert sync["baseline"] == ar["label"] and sync["acc_delta"] == pytest.approx(0, abs=1e-6)
    assert sync["staleness"]["max"] == 0 and ar["staleness"] is None
    assert ssp["staleness"]["max_lead"] <= 1 and sum(ssp["staleness"]["counts"].values()) == 3 * 2 * 4
    assert RunConfig(world=4, straggler="rank:3:2").label().endswith("straggler=rank:3:2")
    for bad, why in [("strategy=ps-ssp", "ssp:K"), ("straggler=rank:9:2", "rank 9 is not in 0..2")]:
        p = _train(["--nproc", "3", "--sweep", bad], tmp_path)
        assert p.returncode == 2 and why in p.stderr, p.stderr


def test_asynchronous_workers_draw_batches_from_a_pool_so_a_straggler_takes_fewer(tmp_path):
    args = ["--nproc", "3", "--epochs", "2", "--steps", "4", "--width", "32", "--straggler", "rank:2:50"]
    p = _train([*args, "--sweep", "strategy=allreduce,ps-async"], tmp_path)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    runs = {
        r["config"]["strategy"]: r
        for r in json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    }
    assert runs["allreduce"]["batches_per_rank"] == [2 * 4] * 3  # a fixed share of every step
    taken = runs["ps-async"]["batches_per_rank"]
    assert sum(taken) == 2 * 4 * 3  # every batch of every epoch, once
    assert taken[2] < min(taken[:2]), taken  # the straggler took fewer


def test_a_bad_sweep_is_refused_before_anything_runs(tmp_path):
    p = _train(["--sweep", "world=1", "optimizer=adam"], tmp_path)
    assert p.returncode == 2 and "unknown sweep key 'optimizer'" in p.stderr
    assert not (tmp_path / "out").exists()
    p = _train(["--algos", "ring,rng"], tmp_path)  # a list is an axis, each name checked
    assert p.returncode == 2 and "algo='rng': choose auto or one of" in p.stderr and "ring" in p.stderr


def test_cluster_rate_takes_a_list_of_rates_each_checked():
    from pyscalecomm.train import cli

    assert cli.parse_args(["--cluster-rate", "1gbit,10gbit"]).cluster_rate == ["1gbit", "10gbit"]
    assert cli.parse_args(["--cluster-rate", "1gbit"]).cluster_rate == ["1gbit"]
    for bad in ("1gbit,1gbit", "1gbit,fast", ","):
        with pytest.raises(SystemExit):
            cli.parse_args(["--cluster-rate", bad])


def test_runs_under_torchrun_with_the_jobs_world(tmp_path):
    port = str(free_port())
    prefix = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", port]
    args = ["--sweep", "backend=gloo,scalecomm", "--epochs", "1", "--steps", "2", "--width", "16"]
    args += ["--no-plots", "--repeat", "2"]
    cmd = [*prefix, "-m", "pyscalecomm.train", "--out-dir", str(tmp_path / "out"), *args]
    p = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert p.stdout.count("| world | threads |") == 1  # rank 0 reports
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    runs = doc["runs"]
    assert {(r["world"], r["config"]["backend"]) for r in runs} == {(2, "gloo"), (2, "scalecomm")}
    assert [r["repeats"] for r in runs] == [2, 2] and len(runs[0]["vs_baseline_range"]) == 2
    assert sorted((r["config"]["backend"], r["repeat"]) for r in doc["all_runs"]) == [
        ("gloo", 0),
        ("gloo", 1),
        ("scalecomm", 0),
        ("scalecomm", 1),
    ]


@pytest.mark.skipif(
    shutil.which("mpirun") is None or not pyscalecomm.built_with_mpi(), reason="needs mpirun and an MPI build"
)
def test_runs_under_mpirun(tmp_path):
    prefix = ["mpirun", "-n", "2", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    args = ["--epochs", "1", "--steps", "2", "--width", "16", "--no-plots", "--backend", "scalecomm"]
    p = _train(args, tmp_path, prefix=prefix)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    runs = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert [r["world"] for r in runs] == [2]
