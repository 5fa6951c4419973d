"""Derived metrics of a sweep, and its tables.

``derive(results)`` adds to each run (the dicts written by the worker):
- ``speedup``: T_1 / T_N, time per epoch of the same backend, codec and
  algorithm on 1 rank with 1 thread over this run's (None without that run);
- ``efficiency``: speedup / cores, cores = world x threads (speedup / N for
  one thread per rank);
- ``vs_baseline``: time per epoch of the baseline over this run's: for a
  data- or model-parallel strategy (allreduce, fsdp, tp, pp, hybrids), the
  stock backend (gloo on CPU, nccl on GPU) without compression running the
  same strategy, same world and threads; for a parameter-server strategy,
  synchronous allreduce without compression on the same backend, world and
  threads;
- ``acc_vs_one``: final accuracy minus the 1-rank run's, in points;
- ``acc_delta``: final accuracy minus the baseline's, in points;
- ``time_to_target_s``: training time until the test accuracy first reached
  the baseline's final accuracy less 0.5 points (None if never), and
  ``sooner``: the baseline's time to that target over this run's.
``fit(results)``: per backend/codec/algorithm/threads with a 1-rank run and
others, the T_N = T_1 / N + T_comm model (T_comm by least squares: the mean
of T_N - T_1 / N), with each run's prediction.

Repeated runs (``--repeat``): ``aggregate(runs)`` first folds the repeats of
each configuration into its median run (by time per epoch), which also
carries ``repeats`` and ``time_per_epoch_runs`` (every repeat's time, in
repeat order). ``vs_baseline`` is then paired: repeat r of a run against
repeat r of its baseline (they ran next to each other), the median of those
ratios (over the repeats both have), with their range in
``vs_baseline_range``: a difference inside that range is not resolved by
the measurement.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

from pyscalecomm import units
from pyscalecomm.train.config import PIPELINES

TARGET_SLACK = 0.005  # 0.5 accuracy points below the baseline's final accuracy


# Config keys the table shows in columns of their own; every other key
# (model, lr, bucket_mb, ...) is the run's "setting": runs are only compared
# (speedup, baseline, fit) with runs of the same setting.
SHOWN = (
    "world",
    "threads",
    "backend",
    "algo",
    "compress",
    "strategy",
    "ps_servers",
    "mesh",
    "microbatches",
    "pp_schedule",
)
# The strategy's own keys: runs that differ only in these are the same
# strategy family with another layout.
_STRATEGY_KEYS = ("strategy", "mesh", "microbatches", "pp_schedule", "ps_servers")


def _setting(c: dict) -> dict:
    return {k: v for k, v in sorted(c.items()) if k not in SHOWN}


def _family(r: dict) -> tuple:
    """Runs that scale the same computation: a 1-rank run of the family is
    their T_1. Data- and model-parallel strategies all run the same model on
    one rank alike (as allreduce); a parameter server's family is its own."""
    c = r["config"]
    strategy = c.get("strategy", "allreduce")
    return (
        c["backend"],
        c["compress"],
        c["algo"],
        strategy if strategy.startswith("ps-") else "",
        *_setting(c).items(),
    )


def _varying(results: list[dict]) -> list[str]:
    """Setting keys whose values differ between runs (shown in a "setting" column)."""
    keys = sorted({k for r in results for k in _setting(r["config"])})
    return [k for k in keys if len({repr(r["config"].get(k)) for r in results}) > 1]


def _setting_label(r: dict, keys: list[str]) -> str:
    return " ".join(f"{k}={r['config'][k]}" for k in keys)


def _baseline_backend(r: dict) -> str:
    return "nccl" if r["config"]["device"] == "cuda" else "gloo"


def _find(results: list[dict], **want) -> dict | None:
    for r in results:
        if all(r["config"].get(k) == v for k, v in want.items()):
            return r
    return None


def _time_to(r: dict, target: float) -> float | None:
    for e in r["epochs"]:
        if e["acc"] is not None and e["acc"] >= target:
            return e["cum_time_s"]
    return None


def aggregate(runs: list[dict]) -> list[dict]:
    """One result per configuration: its median run over the repeats (see above)."""
    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(json.dumps(r["config"], sort_keys=True), []).append(r)
    out = []
    for same in groups.values():
        same = sorted(same, key=lambda r: r.get("repeat", 0))
        times = [r["time_per_epoch_s"] for r in same]
        median = statistics.median_low(times)
        pick = next(r for r in same if r["time_per_epoch_s"] == median)
        ids = [r.get("repeat", 0) for r in same]
        out.append(dict(pick, repeats=len(same), time_per_epoch_runs=times, repeat_ids=ids))
    return out


def _paired_ratio(base: dict, r: dict) -> tuple[float, list[float] | None]:
    """Baseline time over this run's; with repeats on both, the median of the
    per-repeat ratios and their [min, max]."""

    def by_repeat(x: dict) -> dict:
        return dict(zip(x.get("repeat_ids", []), x.get("time_per_epoch_runs", []), strict=True))

    bt, rt = by_repeat(base), by_repeat(r)
    ratios = [bt[k] / rt[k] for k in sorted(bt.keys() & rt.keys())]
    if len(ratios) > 1:
        return statistics.median(ratios), [min(ratios), max(ratios)]
    return base["time_per_epoch_s"] / r["time_per_epoch_s"], None


def derive(results: list[dict]) -> list[dict]:
    for r in results:
        c = r["config"]
        cores = c["world"] * c["threads"]
        one = next(
            (
                o
                for o in results
                if _family(o) == _family(r) and o["config"]["world"] == 1 and o["config"]["threads"] == 1
            ),
            None,
        )
        r["cores"] = cores
        r["speedup"] = one["time_per_epoch_s"] / r["time_per_epoch_s"] if one else None
        r["acc_vs_one"] = None
        if one and one["final_acc"] is not None and r["final_acc"] is not None:
            r["acc_vs_one"] = 100 * (r["final_acc"] - one["final_acc"])
        r["efficiency"] = r["speedup"] / cores if r["speedup"] is not None else None
        strategy = c.get("strategy", "allreduce")
        if strategy.startswith("ps-"):  # against synchronous allreduce on its own backend
            want = {"backend": c["backend"], "compress": "none", "algo": c["algo"], "strategy": "allreduce"}
        else:  # against the stock backend running the same strategy
            want = {"backend": _baseline_backend(r), "compress": "none"}
            want.update({k: c.get(k) for k in _STRATEGY_KEYS if k in c})
        base = _find(results, world=c["world"], threads=c["threads"], **want, **_setting(c))
        r["baseline"] = base["label"] if base else None
        r["vs_baseline"], r["vs_baseline_range"] = _paired_ratio(base, r) if base else (None, None)
        r["acc_delta"] = None
        r["time_to_target_s"] = r["sooner"] = None
        if base and base["final_acc"] is not None and r["final_acc"] is not None:
            r["acc_delta"] = 100 * (r["final_acc"] - base["final_acc"])
            target = base["final_acc"] - TARGET_SLACK
            r["time_to_target_s"] = _time_to(r, target)
            base_t = _time_to(base, target)
            if r["time_to_target_s"] and base_t:
                r["sooner"] = base_t / r["time_to_target_s"]
    return results


def fit(results: list[dict]) -> list[dict]:
    varying = _varying(results)
    fits = []
    ones, families = {}, {}
    for r in results:
        key = _family(r) + (r["config"]["threads"],)
        if r["config"]["world"] == 1:
            ones.setdefault(key, r)
        else:  # one series per strategy (and layout), sharing the family's 1-rank run
            families.setdefault(key + (strategy_label(r["config"]),), []).append(r)
    for series, more in families.items():
        key, strategy = series[:-1], series[-1]
        one = ones.get(key)
        if not one:
            continue
        runs = [one, *more]
        t1 = one["time_per_epoch_s"]
        t_comm = sum(r["time_per_epoch_s"] - t1 / r["config"]["world"] for r in more) / len(more)
        fits.append(
            {
                "backend": key[0],
                "compress": key[1],
                "algo": key[2],
                "threads": key[-1],
                "strategy": strategy,
                "setting": _setting_label(one, varying),
                "t1_s": t1,
                "t_comm_s": t_comm,
                "points": [
                    {
                        "world": r["config"]["world"],
                        "measured_s": r["time_per_epoch_s"],
                        "predicted_s": t1 / r["config"]["world"]
                        + (t_comm if r["config"]["world"] > 1 else 0),
                        "linear_s": t1 / r["config"]["world"],
                    }
                    for r in sorted(runs, key=lambda r: r["config"]["world"])
                ],
            }
        )
    return fits


def strategy_label(c: dict) -> str:
    """A run's strategy as the table and the plots name it ("ps-sync (2 servers)",
    "dp+pp 2x2 1f1b/4")."""
    s = c.get("strategy", "allreduce")
    if s.startswith("ps-"):
        servers = c.get("ps_servers", 1)
        return s if servers == 1 else f"{s} ({servers} servers)"
    if c.get("mesh"):
        s += f" {c['mesh']}"
    if s in PIPELINES:
        s += f" {c.get('pp_schedule', '1f1b')}/{c.get('microbatches', 4)}"
    return s


def _f(v, fmt: str, none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def _percent(v):
    return None if v is None else 100 * v


def _spread(values, fmt: str) -> str:
    """' [min-max]' of repeated measurements; nothing for a single run."""
    if not values or len(values) < 2:
        return ""
    return f" [{min(values):{fmt}}-{max(values):{fmt}}]"


COLUMNS = [
    ("world", lambda r: str(r["config"]["world"])),
    ("threads", lambda r: str(r["config"]["threads"])),
    (
        "backend",
        lambda r: (
            r["config"]["backend"] + ("" if r["config"]["algo"] == "auto" else ":" + r["config"]["algo"])
        ),
    ),
    ("compress", lambda r: r["config"]["compress"]),
    ("strategy", lambda r: strategy_label(r["config"])),
    ("s/epoch", lambda r: _f(r["time_per_epoch_s"], ".3f") + _spread(r.get("time_per_epoch_runs"), ".2f")),
    ("samples/s", lambda r: _f(r["samples_per_s"], ".0f")),
    ("speedup T1/TN", lambda r: _f(r["speedup"], ".2f")),
    (
        "efficiency",
        lambda r: _f(r["efficiency"] and 100 * r["efficiency"], ".0f") + ("%" if r["efficiency"] else ""),
    ),
    (
        "vs baseline",
        lambda r: (
            _f(r["vs_baseline"], ".2f")
            + ("x" if r["vs_baseline"] else "")
            + _spread(r.get("vs_baseline_range"), ".2f")
        ),
    ),
    ("comm %", lambda r: _f(100 * r["comm_share"], ".0f")),
    ("step ms", lambda r: _f(r["step_ms"], ".1f")),
    ("predicted ms", lambda r: _f(r.get("predicted") and 1e3 * r["predicted"]["step_s"], ".1f")),
    ("compute ms", lambda r: _f(r["compute_ms"], ".1f")),
    ("compute +%", lambda r: _f(_percent(r.get("compute_slowdown")), "+.0f")),
    ("peak MiB", lambda r: _f(r["peak_mem_mib"], ".0f")),
    ("state MiB", lambda r: _f(r.get("state_mib"), ".1f")),
    ("bubble", lambda r: _f(r.get("bubble") and 100 * r["bubble"], ".0f") + ("%" if r.get("bubble") else "")),
    ("CPU", lambda r: _f(r["cpu_util"], ".2f")),
    ("loss", lambda r: _f(r["final_loss"], ".4f")),
    ("acc", lambda r: _f(r["final_acc"], ".3f")),
    ("Δacc pts", lambda r: _f(r["acc_delta"], "+.1f")),
    ("Δacc vs 1 rank", lambda r: _f(r.get("acc_vs_one"), "+.1f")),
    ("time to acc s", lambda r: _f(r["time_to_target_s"], ".2f")),
    ("sooner", lambda r: _f(r["sooner"], ".2f") + ("x" if r["sooner"] else "")),
    (
        "staleness mean/max",
        lambda r: f"{r['staleness']['mean']:.1f}/{r['staleness']['max']}" if r.get("staleness") else "-",
    ),
]


def markdown_table(results: list[dict]) -> str:
    varying = _varying(results)
    columns = list(COLUMNS)
    if varying:  # e.g. a sweep over lr or bucket_mb: say which run is which
        columns.insert(4, ("setting", lambda r: _setting_label(r, varying)))
    head = "| " + " | ".join(n for n, _ in columns) + " |"
    rule = "|" + "|".join("---:" for _ in columns) + "|"
    rows = ["| " + " | ".join(get(r) for _, get in columns) + " |" for r in results]
    return "\n".join([head, rule, *rows])


def short_label(r: dict, results: list[dict]) -> str:
    """A run named by the configuration keys that differ between ``results``
    ("backend=scalecomm compress=topk:0.01"), or by its full label."""
    keys = [k for k in r["config"] if len({repr(o["config"].get(k)) for o in results}) > 1]
    return " ".join(f"{k}={r['config'][k]}" for k in keys) or r["label"]


def verdict(results: list[dict]) -> str:
    """One line per run compared with its baseline (the table's story in
    words): how much faster per epoch, the accuracy it ended at, and whether
    and how much sooner it reached the baseline's accuracy; then, per
    baseline of several ranks, how much of its step is exposed communication
    (headroom())."""
    lines, bases = [], []
    for r in results:
        if r.get("vs_baseline") is None or r["baseline"] == r["label"]:
            continue
        rng = r.get("vs_baseline_range")
        spread = f" [{rng[0]:.2f}-{rng[1]:.2f}]" if rng else ""
        # The run it was compared with: its label, at the same setting (a sweep's seeds share labels).
        at = _setting(r["config"])
        compared = next(o for o in results if o["label"] == r["baseline"] and _setting(o["config"]) == at)
        if not any(b is compared for b in bases):
            bases.append(compared)
        base = short_label(compared, results)
        line = f"{short_label(r, results)}: {r['vs_baseline']:.2f}x{spread} the speed of {base} per epoch"
        if r["acc_delta"] is not None:
            line += f", accuracy {r['acc_delta']:+.1f} points"
            if r["sooner"]:
                line += f", at its accuracy {r['sooner']:.2f}x sooner"
            else:
                line += f", never within {100 * TARGET_SLACK:.1f} points of its accuracy in this run"
        lines.append(line)
    lines += [h for h in (headroom(b, results) for b in bases) if h]
    return "\n".join(lines)


def headroom(base: dict, results: list[dict]) -> str:
    """About the most any backend or codec could gain on `base`'s setting:
    its step over its compute alone (forward + backward timed without
    communication, plus its optimizer step), a step with no exposed
    communication. Not a strict bound: inside a step a rank may compute a
    little faster than in the calibration, where every rank computes at
    once. "" for one rank or a step not timed."""
    step, compute = base.get("step_ms"), base.get("compute_ms")
    if base["config"]["world"] < 2 or not step or not compute or step <= compute:
        return ""
    exposed = 100 * (1 - compute / step)
    return (
        f"{short_label(base, results)}: {exposed:.0f} % of its {step:.1f} ms step is exposed communication "
        f"(compute alone {compute:.1f} ms); a step of its compute alone would run {step / compute:.2f}x its "
        f"speed: about the most any backend or codec can gain here"
    )


def diverged(results: list[dict]) -> str:
    """One line per run whose training loss stopped being finite: its
    accuracy and time to accuracy mean nothing (its speed still does)."""
    lines = []
    for r in results:
        bad = [e["epoch"] for e in r["epochs"] if e["loss"] is not None and not math.isfinite(e["loss"])]
        if bad:
            lines.append(
                f"{r['label']}: diverged (training loss not finite from epoch {bad[0]}); its accuracy "
                f"means nothing: lower --lr (now {r['config']['lr']}) or --width"
            )
    return "\n".join(lines)


def still_measuring(results: list[dict]) -> str:
    """One line per run that ended while scalecomm's auto was still measuring
    allreduce sizes: its times include auto's trials, so a short run reads a
    few percent slower than the algorithm auto would settle on."""
    lines = []
    for r in results:
        a = r.get("auto") or {}
        if a.get("exploring_bytes"):
            sizes = ", ".join(units.format_bytes(b) for b in a["exploring_bytes"])
            lines.append(
                f"{r['label']}: auto was still measuring allreduces of up to {sizes} when the run ended "
                f"({a['trial_calls']} of its {a['calls']} calls were trials); its times include them. "
                "A tuning file leaves them out (python -m pyscalecomm.tune under the same launcher, then "
                "SCALECOMM_TUNING_FILE), as does a run long enough to decide (the decision is cached)."
            )
    return "\n".join(lines)


def compression_choices(results: list[dict]) -> str:
    """compress=auto's choice per bucket and why, per run that used it."""
    blocks = []
    for r in results:
        chosen = r.get("compression_choices")
        if not chosen:
            continue
        lines = [f"{r['label']}: compress=auto chose, per DDP bucket (the same on every rank):"]
        for c in chosen:
            name = c["key"].replace("ddp-bucket-", "bucket ")
            mib = c["elements"] * 4 / (1 << 20)
            lines.append(f"  {name} ({mib:.2f} MiB): {c['choice']} because {c['reason']}")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def adaptive_plans(results: list[dict]) -> str:
    """strategy=adaptive's plan per unit and its timed candidates, per run that used it."""
    from pyscalecomm.train.adaptive import describe

    blocks = [
        f"{r['label']}: strategy=adaptive planned (the same on every rank):\n" + describe(r["adaptive"])
        for r in results
        if r.get("adaptive")
    ]
    return "\n".join(blocks)


def prediction_table(predicted: list[tuple]) -> str:
    """(config, prediction) pairs before running: step, compute, communication, state."""
    lines = [
        "| world | threads | strategy | mesh DxM | predicted step ms | compute ms | comm ms "
        "| state MiB/rank |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    seen = set()
    for c, p in predicted:
        cfg = dataclasses.asdict(c)
        key = (c.world, c.threads, strategy_label(cfg), *_setting(cfg).items())
        if key in seen:  # the prediction does not depend on the backend
            continue
        seen.add(key)
        lines.append(
            f"| {c.world} | {c.threads} | {strategy_label(cfg)} | {p['mesh'][0]}x{p['mesh'][1]} "
            f"| {1e3 * p['step_s']:.2f} | {1e3 * p['compute_s']:.2f} | {1e3 * p['comm_s']:.2f} "
            f"| {p['state_bytes'] / 2**20:.2f} |"
        )
    return "\n".join(lines)


def prediction_verdict(results: list[dict]) -> str:
    """Per group of runs that differ only in their strategy (same world,
    threads, backend, codec and setting), with two or more predicted: the
    strategy the predictor named, the one measured fastest (time per epoch),
    and by how much the predicted one fell behind where they differ."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        if r.get("predicted"):
            c = r["config"]
            key = (c["world"], c["threads"], c["backend"], c["compress"], c["algo"], *_setting(c).items())
            groups.setdefault(key, []).append(r)
    lines = []
    for key, runs in groups.items():
        if len(runs) < 2:
            continue
        named = min(runs, key=lambda r: r["predicted"]["step_s"])
        fastest = min(runs, key=lambda r: r["time_per_epoch_s"])
        head = f"world={key[0]} backend={key[2]}" + (f" threads={key[1]}" if key[1] != 1 else "")
        pred = strategy_label(named["config"])
        if named is fastest:
            lines.append(f"{head}: predicted {pred}, measured {pred} fastest: hit")
        else:
            behind = named["time_per_epoch_s"] / fastest["time_per_epoch_s"]
            lines.append(
                f"{head}: predicted {pred}, measured {strategy_label(fastest['config'])} fastest "
                f"({pred} {behind:.2f}x its time per epoch): miss"
            )
    return "\n".join(lines)


def fit_table(fits: list[dict]) -> str:
    if not fits:
        return ""
    lines = [
        "| backend | compress | threads | T_1 s | T_comm s | world | measured s "
        "| T_1/N + T_comm s | linear T_1/N s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in fits:
        notes = ", ".join(
            x for x in (f["setting"], "" if f["strategy"] == "allreduce" else f["strategy"]) if x
        )
        for p in f["points"]:
            lines.append(
                f"| {f['backend']}{' (' + notes + ')' if notes else ''} | {f['compress']} "
                f"| {f['threads']} | {f['t1_s']:.3f} "
                f"| {f['t_comm_s']:.3f} | "
                f"{p['world']} | {p['measured_s']:.3f} | {p['predicted_s']:.3f} | {p['linear_s']:.3f} |"
            )
    return "\n".join(lines)


def scaling_table(results: list[dict]) -> str:
    """More ranks vs more threads per rank, for each core count both were run at."""
    lines = []
    for r in results:
        c = r["config"]
        if c["threads"] != 1 or c["world"] == 1:
            continue
        v = _find(
            results,
            backend=c["backend"],
            compress=c["compress"],
            algo=c["algo"],
            world=1,
            threads=c["world"],
            **_setting(c),
        )
        if v is None:
            continue
        if not lines:
            lines = [
                "| cores | backend | compress | ranks x 1 thread s/epoch | 1 rank x threads s/epoch "
                "| ranks/threads |",
                "|---:|---|---|---:|---:|---:|",
            ]
        lines.append(
            f"| {c['world']} | {c['backend']} | {c['compress']} | {r['time_per_epoch_s']:.3f} | "
            f"{v['time_per_epoch_s']:.3f} | {v['time_per_epoch_s'] / r['time_per_epoch_s']:.2f}x |"
        )
    return "\n".join(lines)
