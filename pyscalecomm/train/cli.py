"""Data-parallel training experiments: speedup, efficiency, communication overhead, accuracy.

One configuration (2 local ranks, scalecomm, digits, MLP):
    python -m pyscalecomm.train --nproc 2
A sweep (the product of the axes; any option below is an axis):
    python -m pyscalecomm.train --sweep world=1,2,4 backend=gloo,scalecomm compress=none,topk:0.01
Repeated, round-robin (medians, the spread, ratios paired per repeat):
    python -m pyscalecomm.train --sweep world=2 backend=gloo,scalecomm --repeat 5
Allreduce against a parameter server, with a straggler (each step one random rank 3x slower):
    python -m pyscalecomm.train --nproc 4 --straggler random:3 \
        --sweep strategy=allreduce,ps-sync,ps-async,ps-ssp:4
More ranks vs more threads per rank (horizontal vs vertical scaling):
    python -m pyscalecomm.train --sweep world=1,2 threads=1,2 backend=gloo,scalecomm
On an emulated cluster (root: one network namespace per rank, links capped):
    sudo python -m pyscalecomm.train --cluster-rate 1gbit --sweep world=1,4 ...
Against stock NCCL on GPUs (ranks sharing a GPU meet as hosts, over NCCL's sockets):
    sudo python -m pyscalecomm.train --device cuda --cluster-rate 1gbit,10gbit \\
        --sweep backend=nccl,scalecomm compress=none,topk:0.01,powersgd:2
Under a launcher (the job's ranks run every configuration of the sweep):
    torchrun --nproc-per-node 4 -m pyscalecomm.train --sweep backend=gloo,scalecomm
    mpirun -n 4 python -m pyscalecomm.train ...        srun -n 4 python -m pyscalecomm.train ...

Prints a Markdown table (time per epoch, samples/s, speedup T1/TN, efficiency,
speedup over the stock backend, share of the step spent in exposed
communication, peak memory, CPU use, final loss and accuracy, accuracy delta
to the baseline, time to the baseline's accuracy; parameter-server runs are
compared with synchronous allreduce and report their gradients' staleness), the fit of
T_N = T_1/N + T_comm, and writes results.json and speedup.png,
breakdown.png, accuracy.png into --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

from pyscalecomm._cli import HelpFormatter, add_nproc, add_version, warn_old_spellings
from pyscalecomm.train import report
from pyscalecomm.train.config import BACKENDS, RunConfig, expand
from pyscalecomm.train.data import DATASETS
from pyscalecomm.train.models import MODELS
from pyscalecomm.units import parse_seconds, rate_text


def _rates(text: str) -> list[str]:
    """An argparse type: a comma list of link rates, each checked."""
    rates = [rate_text(r) for r in text.split(",") if r]
    if not rates or len(set(rates)) != len(rates):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more distinct rates, e.g. 1gbit,10gbit")
    return rates


def parse_args(argv=None):
    d = RunConfig()
    p = argparse.ArgumentParser(
        prog="python -m pyscalecomm.train",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--model", choices=MODELS, default=d.model, help="the model trained")
    p.add_argument(
        "--width", type=int, default=d.width, help="model size (hidden units / channels / d_model)"
    )
    p.add_argument(
        "--data",
        choices=DATASETS,
        default=d.data,
        help="digits: scikit-learn's 8x8 digits; synthetic: generated",
    )
    p.add_argument("--samples", type=int, default=d.samples, help="synthetic training samples")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default=d.backend,
        help="torch.distributed backend (--sweep backend=gloo,scalecomm compares them)",
    )
    p.add_argument(
        "--algo",
        "--algos",
        default=d.algo,
        help="scalecomm allreduce algorithm (auto, ring, rhd, ...); a comma list (as bench's --algos) "
        "is a sweep axis",
    )
    p.add_argument(
        "--compress",
        default=d.compress,
        help="none, auto (a codec per bucket, chosen by measurement), fp16, topk:0.01, sign, powersgd:4, ...",
    )
    p.add_argument(
        "--bucket-mb",
        type=float,
        default=d.bucket_mb,
        help="DDP bucket cap in MiB (default: 0, DDP's own: a 1 MiB first bucket then 25)",
    )
    p.add_argument(
        "--strategy",
        default=d.strategy,
        help="allreduce (DDP), fsdp, tp, pp, dp+tp, dp+pp, adaptive (a mode per block of the model, planned "
        "and timed), or a parameter server: ps-sync, ps-async, ps-ssp:K (no worker more than K steps ahead "
        "of the slowest)",
    )
    p.add_argument(
        "--max-state-mb",
        type=float,
        default=d.max_state_mb,
        help="strategy=adaptive: leave out plans that hold more model state (parameters, gradients, "
        "momentum) per rank than this (default 0: no cap)",
    )
    p.add_argument("--ps-servers", type=int, default=d.ps_servers, help="ps strategies: server ranks 0..S-1")
    p.add_argument(
        "--straggler",
        default=d.straggler,
        help="none, rank:R:F (rank R's compute always F x as long) or random:F (each step one rank, "
        "drawn from the seed, F x as long)",
    )
    p.add_argument("--epochs", type=int, default=d.epochs, help="passes over the training set")
    p.add_argument("--steps", type=int, default=d.steps, help="steps per epoch (0: the whole training set)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="samples per rank and step")
    p.add_argument(
        "--lr", type=float, default=d.lr, help="learning rate of the optimizer (SGD with momentum)"
    )
    p.add_argument(
        "--seed", type=int, default=d.seed, help="seed of the weights, the batch order and the stragglers"
    )
    p.add_argument("--threads", type=int, default=d.threads, help="intra-op threads per rank")
    p.add_argument(
        "--device", choices=("cpu", "cuda"), default=d.device, help="where the model and the gradients live"
    )
    add_nproc(p, default=2, help="ranks (world) of a single run without a launcher")
    p.add_argument("--sweep", nargs="*", default=[], metavar="KEY=V1,V2", help="grid axes, e.g. world=1,2,4")
    p.add_argument(
        "--cluster-rate",
        type=_rates,
        default=None,
        help="run on an emulated cluster with links of this rate (root): 1gbit, 10Gbps, 1.25GB/s; a "
        "comma list runs the sweep once per rate, each with its own report in <out-dir>/<rate> "
        "(default: none, the ranks share this host)",
    )
    p.add_argument(
        "--cpus-per-host",
        type=float,
        default=None,
        help="with --cluster-rate: each emulated host's CPU share in cores (0.4: 40 ms per 100 ms, a cgroup "
        "per host), so every backend's ranks compute at the same known speed (default: none, shared cores)",
    )
    p.add_argument(
        "--host-cpus",
        default="",
        help="with --cluster-rate: per-host shares that differ, host:cores[,...] (3:0.2: a straggler host)",
    )
    p.add_argument(
        "--out-dir", "--out", dest="out", default=None, help="output folder (default: results/train-<time>)"
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run the grid N times, round-robin; the table shows medians and the spread",
    )
    p.add_argument(
        "--fault-tolerant",
        action="store_true",
        help="torchft's Manager + DDP, one process per replica, the replica group on each --sweep backend "
        "(default: gloo and scalecomm side by side); a run without failures, then one with a replica "
        "killed and restarted every --kill-every seconds (pyscalecomm.train.fault_tolerant)",
    )
    p.add_argument("--replicas", type=int, default=2, help="--fault-tolerant: replicas (processes)")
    p.add_argument(
        "--kill-every",
        type=parse_seconds,
        default=15.0,
        metavar="SECONDS",
        help="--fault-tolerant: seconds between failures (15, 15s, 500ms)",
    )
    p.add_argument("--timeout", type=float, default=900, help="seconds per configuration")
    p.add_argument("--no-plots", action="store_true", help="write no PNG plots (the tables and JSON only)")
    add_version(p)
    args = p.parse_args(argv)
    warn_old_spellings(p.prog, argv, {"--out": "--out-dir"})
    from pyscalecomm.cluster import host_cpus

    try:  # every host the cluster may have; the runner keeps those it makes
        args.cpus = host_cpus(64, args.cpus_per_host, args.host_cpus)
    except ValueError as e:
        p.error(str(e))
    return args


def _base(args) -> RunConfig:
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    kw = {k: v for k, v in vars(args).items() if k in fields}
    return RunConfig(world=args.nproc, **kw)


def _predictions(configs: list[RunConfig], cluster_rate: str | None) -> dict[str, dict]:
    """:func:`_predict`, or none where it fails (it only informs: the sweep runs regardless)."""
    try:
        return _predict(configs, cluster_rate)
    except Exception as e:  # noqa: BLE001 - a failed prediction must not cost the measurement
        print(f"# no prediction: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        return {}


def _predict(configs: list[RunConfig], cluster_rate: str | None) -> dict[str, dict]:
    """Each multi-rank configuration's predicted step (pyscalecomm.train.predict),
    by label: compute measured here once per model and batch, the link's
    alpha-beta. Printed before anything runs; the report sets them beside
    the measurements."""
    import torch

    from pyscalecomm.train import data, models, predict, strategies

    wanted = [
        c
        for c in configs
        if c.world > 1 and not c.strategy.startswith("ps-") and c.strategy != "adaptive" and c.device == "cpu"
    ]
    if not wanted:
        return {}
    link = predict.link_for(cluster_rate)
    profiles, costs, out = {}, {}, {}
    threads = torch.get_num_threads()
    for c in wanted:
        key = (c.model, c.width, c.data, c.samples, c.batch_size * c.world, c.threads, c.seed)
        if key not in profiles:
            d = data.load(c.data, c.model, c.samples)
            torch.manual_seed(c.seed)
            torch.set_num_threads(c.threads)
            model = models.build(c.model, d.input_shape, d.classes, c.width)
            profiles[key] = predict.profile(model, d.train_x[0], c.batch_size * c.world)
            costs[key] = predict.overheads(c)
        mesh = strategies.mesh_shape(c.strategy, c.world, c.mesh)
        p = predict.predict(
            c.strategy,
            c.world,
            mesh,
            profiles[key],
            link,
            threads=c.threads,
            microbatches=c.microbatches,
            overhead=costs[key],
        )
        out[c.label()] = dict(p.as_dict(), link=link.name, mesh=list(mesh))
    torch.set_num_threads(threads)
    print(f"# predicted before running (compute measured here, alpha-beta over {link.name}):")
    print(report.prediction_table([(c, out[c.label()]) for c in wanted]), flush=True)
    return out


def _report(runs: list[dict], out_dir: str, plots: bool, predicted: dict | None = None) -> None:
    results = report.aggregate(runs)
    for r in results:
        r["predicted"] = (predicted or {}).get(r["label"])
    report.derive(results)
    fits = report.fit(results)
    print()
    print(report.markdown_table(results))
    bad = report.diverged(results)
    if bad:
        print("\n" + bad)
    measuring = report.still_measuring(results)
    if measuring:
        print("\n" + measuring)
    chosen = report.compression_choices(results)
    if chosen:
        print("\n" + chosen)
    plans = report.adaptive_plans(results)
    if plans:
        print("\n" + plans)
    story = report.verdict(results)
    if story:
        print("\n" + story)
    hits = report.prediction_verdict(results)
    if hits:
        print("\nPredicted against measured, per group of strategies:\n" + hits)
    scaling = report.scaling_table(results)
    if scaling:
        print("\nHorizontal (ranks) vs vertical (threads per rank) scaling at equal cores:\n")
        print(scaling)
    if fits:
        print("\nT_N = T_1/N + T_comm fitted per series (time per epoch):\n")
        print(report.fit_table(fits))
    path = os.path.join(out_dir, "results.json")
    with open(path, "w") as f:
        doc = {"runs": results, "fits": fits}
        if len(runs) > len(results):  # repeats: every run as measured, too
            doc["all_runs"] = runs
        json.dump(doc, f, indent=1)
    written = [path]
    if plots:
        from pyscalecomm.train import plots as plots_mod

        written += plots_mod.write(results, out_dir)
    print("\n# wrote " + ", ".join(written))


def main(argv=None) -> int:
    args = parse_args(argv)
    # c10d's TCPStore warns on every connection from an emulated host it cannot
    # name ("hostname of the client socket cannot be retrieved"): not ours to fix.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    out_dir = args.out or os.path.join("results", time.strftime("train-%Y%m%d-%H%M%S"))
    from pyscalecomm.launch import env_from_launcher

    launcher = env_from_launcher() if args.cluster_rate is None else None
    try:
        if launcher:
            args.nproc = int(os.environ["WORLD_SIZE"])
        if "," in args.algo:  # one run per algorithm, as bench, tune and simulate take them
            args.sweep = [*args.sweep, f"algo={args.algo}"]
            args.algo = RunConfig.algo
        configs, skipped = expand(_base(args), args.sweep)
        if args.repeat < 1:
            raise ValueError(f"--repeat {args.repeat}: give 1 or more")
    except ValueError as e:
        print(f"pyscalecomm.train: {e}", file=sys.stderr)
        return 2
    os.makedirs(out_dir, exist_ok=True)
    if args.fault_tolerant:
        return _fault_tolerant(args, out_dir)
    compare = len({c.strategy for c in configs}) > 1  # a sweep over strategies: predict them first
    reasons: dict[str, list[str]] = {}
    for label, why in skipped:
        reasons.setdefault(why, []).append(label)
    for why, labels in reasons.items():
        print(f"# left out ({why}): " + "; ".join(labels), flush=True)
    if launcher:  # this process is one rank of the job
        from pyscalecomm.train import worker

        if any(c.world != args.nproc for c in configs):
            print(
                f"pyscalecomm.train: under {launcher} the world is the job's ({args.nproc})", file=sys.stderr
            )
            return 2
        from pyscalecomm.train.runner import collect, schedule

        predicted = _predictions(configs, None) if compare and int(os.environ["RANK"]) == 0 else {}
        worker.run_configs(schedule(configs, args.repeat), out_dir)
        if int(os.environ["RANK"]) == 0:
            _report(collect(configs, out_dir, args.repeat), out_dir, not args.no_plots, predicted)
        return 0
    if (args.cpus_per_host is not None or args.host_cpus) and not args.cluster_rate:
        print("pyscalecomm.train: --cpus-per-host and --host-cpus need --cluster-rate", file=sys.stderr)
        return 2
    if args.cluster_rate and os.geteuid() != 0:
        print(
            "pyscalecomm.train --cluster-rate needs root (network namespaces); nothing was run",
            file=sys.stderr,
        )
        return 2
    worst = 0
    for rate in args.cluster_rate or [None]:
        where = out_dir if rate is None or len(args.cluster_rate) == 1 else os.path.join(out_dir, rate)
        if where != out_dir:
            print(f"\n## {rate} links", flush=True)
        worst = max(worst, _sweep(args, configs, rate, where, compare), key=abs)
    return worst


def _fault_tolerant(args, out_dir: str) -> int:
    """--fault-tolerant: each backend's run without and with failures (pyscalecomm.train.fault_tolerant)."""
    from pyscalecomm.train import fault_tolerant

    sweep = (
        args.sweep
        if any(a.startswith("backend=") for a in args.sweep)
        else [*args.sweep, "backend=gloo,scalecomm"]
    )
    os.environ.setdefault("RUST_LOG", "warn")  # torchft's lighthouse logs every quorum request at info
    try:
        import torchft  # noqa: F401
    except ImportError:
        print("pyscalecomm.train --fault-tolerant needs torchft (pip install torchft)", file=sys.stderr)
        return 2
    try:
        if args.replicas < 2:
            raise ValueError(f"--replicas {args.replicas}: give 2 or more")
        configs, _ = expand(dataclasses.replace(_base(args), world=1), sweep)
        fault_tolerant.check(configs)
    except ValueError as e:
        print(f"pyscalecomm.train: {e}", file=sys.stderr)
        return 2
    return fault_tolerant.run(configs, args.replicas, args.kill_every, out_dir, args.timeout)


def _sweep(args, configs: list[RunConfig], rate: str | None, out_dir: str, compare: bool) -> int:
    """Runs and reports the sweep on this host, or on an emulated cluster with `rate` links."""
    from pyscalecomm.train import runner

    os.makedirs(out_dir, exist_ok=True)
    times = f" x {args.repeat} repeats" if args.repeat > 1 else ""
    predicted = _predictions(configs, rate) if compare else {}
    print(f"# {len(configs)} configuration(s){times}, results in {out_dir}", flush=True)
    code = runner.run(configs, out_dir, args.timeout, rate, args.repeat, cpus=args.cpus)
    results = runner.collect(configs, out_dir, args.repeat)
    if results:
        _report(results, out_dir, not args.no_plots, predicted)
    return code if code else (0 if len(results) == len(configs) * args.repeat else 1)


if __name__ == "__main__":
    sys.exit(main())
