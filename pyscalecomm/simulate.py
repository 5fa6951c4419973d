"""Price allreduce algorithms for any world size without running them.

    python -m pyscalecomm.simulate --world 1024 --bytes 256M --alpha 5us --rate 100Gbit
    python -m pyscalecomm.simulate --sweep --alpha 5us --rate 100Gbit
    python -m pyscalecomm.simulate --ranks-per-host 8 --intra-alpha 1us --intra-rate 200GB ...
    python -m pyscalecomm.simulate --measured bench.jsonl --alpha 20us --rate 4GB
    python -m pyscalecomm.simulate --measured bench.jsonl --tuning-file CACHE   # probed vs fitted model
    python -m pyscalecomm.simulate --strategy ddp,fsdp,tp,pp,dp+tp,dp+pp --world 512 --mesh 64x8 \
        --model transformer --width 1024 --batch-size 8 --alpha 10us --rate 100Gbit

The model (csrc/algo/cost_model.h) walks each algorithm's real schedule: the
first segment crosses every step (per step, the slowest rank pays alpha, a
per-extra-message overhead and one segment's bytes x 1/bandwidth), then the
busiest rank streams the rest of its bytes (each link direction serialised).
The first form prints every algorithm's predicted time, bus bandwidth and the
winner; --sweep prints the winner for world sizes 8..65,536 and sizes 8 B..1
GiB (where the crossovers fall); --measured reads JSON lines written by
``python -m pyscalecomm.bench --json FILE`` and prints predicted against measured
time with the relative error, per algorithm and size; with --tuning-file
(a cache auto wrote, re-fitted by ``python -m pyscalecomm.tune --fit``) it
prices every point with that cache's model too and prints both errors.

--strategy prices the training driver's parallelism strategies instead
(pyscalecomm.train.predict: the same model the driver prints before a run):
each one's step time (compute, communication) and model state per rank for
--model at --width, --batch-size samples per rank, on --world ranks over
links of --alpha and --rate, with the expected winner. Compute is the
model's forward and backward measured on this machine (with each strategy's
PyTorch overhead), or --compute-ms for the global batch on another machine.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys

from pyscalecomm._cli import HelpFormatter, add_version, warn_old_spellings
from pyscalecomm.units import parse_rate

_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_time(text: str) -> float:
    """'5us' -> 5e-6 seconds; the unit (s, ms, us, ns) is required."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(s|ms|us|µs|ns)\s*", text)
    try:
        if m:
            return float(m.group(1)) * _TIME[m.group(2)]
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"not a time: {text!r}; give a unit (e.g. 5us, 1.5ms, 0.002s)")


def fmt_bytes(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def predict(algorithm, world, nbytes, args) -> float:
    """One allreduce priced with the command line's model."""
    model = {
        "alpha": args.alpha,
        "beta": 1.0 / args.bandwidth,
        "overhead": args.overhead,
        "gamma": args.gamma,
        "segment_bytes": args.segment,
        "intra_alpha": args.intra_alpha if args.intra_alpha is not None else -1.0,
        "intra_beta": 1.0 / args.intra_bandwidth if args.intra_bandwidth else -1.0,
    }
    return predict_with(
        model, algorithm, world, nbytes, args.ranks_per_host, ps_servers=min(args.ps_servers, world)
    )


def predict_with(
    model: dict,
    algorithm: str,
    world: int,
    nbytes: int,
    ranks_per_host: int,
    window_bytes: int = 0,
    ps_servers: int = 1,
) -> float:
    """One allreduce priced with a model dict (the command line's, a group's
    cost_params or a tuning cache's)."""
    from pyscalecomm import _C

    return _C.predict_allreduce(
        algorithm,
        world,
        nbytes,
        model,
        segment_bytes=model.get("segment_bytes", 0),
        ranks_per_host=ranks_per_host,
        ps_servers=ps_servers,
        window_bytes=window_bytes,
    )


def parse_args(argv=None):
    from pyscalecomm.bench import parse_size

    p = argparse.ArgumentParser(
        prog="python -m pyscalecomm.simulate",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--world", type=int, default=1024, help="ranks")
    p.add_argument("--bytes", type=parse_size, default="256M", help="allreduce size in bytes (8, 64K, 256M)")
    p.add_argument("--alpha", type=parse_time, default="5us", help="latency per message (s, ms, us, ns)")
    p.add_argument(
        "--rate",
        "--bandwidth",
        dest="bandwidth",
        type=parse_rate,
        default="100Gbit",
        help="link rate per rank, each direction: bits as 100Gbit, bytes as 10GB/s",
    )
    p.add_argument("--overhead", type=parse_time, default="0.5us", help="time per extra message in a step")
    p.add_argument("--gamma", type=float, default=0.0, help="seconds per byte reduced")
    p.add_argument(
        "--segment", type=parse_size, default="256K", help="pipelining unit in bytes (0: no pipelining)"
    )
    p.add_argument("--ranks-per-host", type=int, default=0, help="hosts of this many ranks (0: one per rank)")
    p.add_argument(
        "--intra-alpha",
        type=parse_time,
        default=None,
        help="latency inside a host, e.g. 1us (default: --alpha)",
    )
    p.add_argument(
        "--intra-rate",
        "--intra-bandwidth",
        dest="intra_bandwidth",
        type=parse_rate,
        default=None,
        help="link rate inside a host, as --rate: 1Gbit, 10GB/s (default: --rate)",
    )
    p.add_argument("--ps-servers", type=int, default=1, help="server ranks of ps")
    p.add_argument(
        "--measured",
        default="",
        help="bench --json file: predicted vs measured (with the alpha and beta each run probed,"
        " unless --alpha is given)",
    )
    p.add_argument(
        "--tuning-file",
        default="",
        help="with --measured: also price every point with this tuning cache's model "
        "(e.g. re-fitted by tune --fit)",
    )
    p.add_argument("--algos", default="", help="comma list (default: all but ps, and hier without hosts)")
    p.add_argument("--sweep", action="store_true", help="winner table over world sizes and message sizes")
    g = p.add_argument_group("training strategies (--strategy)")
    g.add_argument("--strategy", default="", help="comma list: ddp, fsdp, tp, pp, dp+tp, dp+pp")
    g.add_argument("--model", default="mlp", help="a driver model: mlp, cnn, resnet, transformer")
    g.add_argument("--width", type=int, default=1024, help="the driver's --width")
    g.add_argument("--batch-size", type=int, default=32, help="samples per rank (the global batch: x world)")
    g.add_argument("--mesh", default="", help="hybrids: DxM (default (world/2)x2)")
    g.add_argument("--microbatches", type=int, default=4, help="pipelines: microbatches per step")
    g.add_argument(
        "--compute-ms",
        type=float,
        default=0.0,
        help="forward + backward of the global batch on one process, in ms (0: measured here)",
    )
    add_version(p)
    args = p.parse_args(argv)
    warn_old_spellings(p.prog, argv, {"--bandwidth": "--rate", "--intra-bandwidth": "--intra-rate"})
    return args


def main(argv=None) -> int:
    import pyscalecomm

    args = parse_args(argv)
    args.alpha_given = args.alpha if "--alpha" in " ".join(argv if argv is not None else sys.argv) else None
    # ps is a baseline, hier needs hosts, shared runs on one host's memory (no links to model)
    default = [
        a
        for a in pyscalecomm.allreduce_algorithms()
        if a not in ("ps", "shared") and (a != "hier" or args.ranks_per_host)
    ]
    algos = [a for a in args.algos.split(",") if a] or default
    print(
        f"# alpha {args.alpha * 1e6:g} us, bandwidth {args.bandwidth * 8 / 1e9:g} Gbit/s, "
        f"overhead {args.overhead * 1e6:g} us/message, gamma {args.gamma:g} s/B"
    )
    if args.strategy:
        return _strategies(args)
    if args.measured:
        return _compare(args)
    if not args.sweep:
        print(f"# allreduce of {fmt_bytes(args.bytes)} B on {args.world} ranks")
        print(f"{'algorithm':>10} {'time(us)':>14} {'busbw(GB/s)':>12}")
        serving = set(pyscalecomm.allreduce_algorithms(args.world, args.bytes))
        for a in algos:
            if a not in serving:
                print(f"# {a}: does not serve {args.world} ranks and {args.bytes} bytes")
        times = {a: predict(a, args.world, args.bytes, args) for a in algos if a in serving}
        factor = 2 * (args.world - 1) / args.world if args.world > 1 else 1
        for a, t in times.items():
            bw = args.bytes / t / 1e9 * factor if t > 0 else float("inf")
            print(f"{a:>10} {t * 1e6:>14.1f} {bw:>12.2f}")
        print(f"winner: {min(times, key=times.get)}")
        return 0
    worlds = [8, 24, 64, 1000, 4096, 65536]
    sizes = [8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30]
    print("# predicted winner (and its time) per world size and message size")
    print(f"{'bytes':>8}" + "".join(f" | {w:>20}" for w in worlds))
    for s in sizes:
        row = f"{fmt_bytes(s):>8}"
        for w in worlds:
            serving = set(pyscalecomm.allreduce_algorithms(w, s))
            times = {a: predict(a, w, s, args) for a in algos if a in serving}
            best = min(times, key=times.get)
            row += f" | {best:>7} {times[best] * 1e6:>10.0f}us"
        print(row, flush=True)
    return 0


def _compare(args) -> int:
    """Predicted vs measured time for every scalecomm record of a bench --json file."""
    import json

    from pyscalecomm import _C

    fitted = _C.tuning_model(args.tuning_file) if args.tuning_file else None
    if fitted is not None and not fitted["has_model"]:
        print(
            f"# {args.tuning_file} has no model; run python -m pyscalecomm.tune --fit on it", file=sys.stderr
        )
        return 2
    print(
        f"{'algorithm':>10} {'world':>5} {'bytes':>10} {'measured(us)':>13} "
        f"{'predicted(us)':>14} {'error':>7}" + (f" {'fitted(us)':>11} {'error':>7}" if fitted else "")
    )
    errors = {}  # world -> (probe errors, fitted errors)
    for line in open(args.measured):
        r = json.loads(line)
        if r.get("backend") != "scalecomm" or r.get("algorithm") in (None, "auto", "mpi"):
            continue
        world, nbytes, measured = r["world_size"], r["bytes"], r["time_us"] * 1e-6
        host_of = r.get("host_of") or []
        per_host = world if not host_of or len(set(host_of)) == 1 else host_of.count(host_of[0])
        window = r.get("window_bytes", 0)
        if args.alpha_given is None and r.get("model"):  # the group's own probe, every term
            model = dict(r["model"], segment_bytes=r.get("segment_bytes") or 0)
            pred = predict_with(model, r["algorithm"], world, nbytes, per_host, window)
        else:
            if args.alpha_given is None and r.get("model_alpha"):
                args.alpha, args.bandwidth = r["model_alpha"], 1.0 / r["model_beta"]
                args.overhead = args.alpha
            pred = predict(r["algorithm"], world, nbytes, args)
        err = (pred - measured) / measured
        probe_err, fit_err = errors.setdefault(world, ([], []))
        probe_err.append(abs(err))
        row = (
            f"{r['algorithm']:>10} {world:>5} {nbytes:>10} {r['time_us']:>13.1f} "
            f"{pred * 1e6:>14.1f} {err * 100:>6.0f}%"
        )
        if fitted is not None:
            model = dict(fitted, segment_bytes=r.get("segment_bytes") or 0)
            fpred = predict_with(model, r["algorithm"], world, nbytes, per_host, window)
            ferr = (fpred - measured) / measured
            fit_err.append(abs(ferr))
            row += f" {fpred * 1e6:>11.1f} {ferr * 100:>6.0f}%"
        print(row)
    for world, (probe_err, fit_err) in sorted(errors.items()):
        probe, fit = statistics.median_high(probe_err), statistics.median_high(fit_err) if fit_err else 0.0
        line = f"# world {world}: {len(probe_err)} points: median |error| {probe * 100:.0f}%, "
        line += f"max {max(probe_err) * 100:.0f}%"
        if fit_err:
            line += f"; fitted model: median {fit * 100:.0f}%, max {max(fit_err) * 100:.0f}%"
        print(line)
    return 0


def _strategies(args) -> int:
    """The driver's strategies priced for --world ranks (see the module doc)."""
    import torch

    from pyscalecomm.train import data, models, predict, strategies
    from pyscalecomm.train.config import RunConfig

    d = data.load("digits", args.model)
    torch.manual_seed(0)
    model = models.build(args.model, d.input_shape, d.classes, args.width)
    batch = args.batch_size * args.world
    probe = min(batch, args.batch_size * 8)  # measured at up to 8 ranks' batch, scaled linearly
    prof = predict.profile(model, d.train_x[0], probe)
    overhead = None
    if args.compute_ms:
        prof = predict.scaled(prof, batch, args.compute_ms / 1e3)
        source = f"given: {args.compute_ms:g} ms"
    else:
        prof = predict.scaled(prof, batch)
        overhead = predict.overheads(
            RunConfig(model=args.model, width=args.width, batch_size=args.batch_size)
        )
        source = f"measured here at {probe} samples, scaled: {prof.compute_s * 1e3:.1f} ms"
    link = predict.Link(args.alpha, 1.0 / args.bandwidth, "links")
    print(
        f"# {args.model} (width {args.width}, {prof.params / 1e6:.2f} M parameters) on {args.world} ranks, "
        f"global batch {batch}; compute of the global batch on one process {source}"
    )
    head = f"{'strategy':>10} {'mesh':>9} {'step(ms)':>12} {'compute(ms)':>12} {'comm(ms)':>12}"
    print(head + f" {'state MiB/rank':>15}")
    times = {}
    for name in (x for x in args.strategy.split(",") if x):
        try:
            mesh = strategies.mesh_shape(name, args.world, args.mesh if "+" in name else "")
            p = predict.predict(
                name,
                args.world,
                mesh,
                prof,
                link,
                cores=args.world,
                microbatches=args.microbatches,
                overhead=overhead,
            )
        except ValueError as e:
            print(f"# {name}: {e}")
            continue
        times[name] = p.step_s
        print(
            f"{name:>10} {mesh[0]:>4}x{mesh[1]:<4} {p.step_s * 1e3:>12.2f} {p.compute_s * 1e3:>12.2f} "
            f"{p.comm_s * 1e3:>12.2f} {p.state_bytes / 2**20:>15.2f}"
        )
    if times:
        print(f"expected winner: {min(times, key=times.get)}")
    return 0 if times else 2


if __name__ == "__main__":
    sys.exit(main())
