"""Runs the driver's configurations, each as a job of its own (fresh
processes: peak memory, threads and allocator state belong to that
configuration alone, and a failed configuration does not stop the sweep),
either as local processes or inside an emulated cluster (pyscalecomm.cluster:
one rank per host on rate-limited links). Returns the results that rank 0
wrote.

With repeats, the whole grid runs once per repeat, round-robin (repeat 0 of
every configuration, then repeat 1, ...), so drift of a shared machine hits
every configuration alike and repeat r of two configurations ran close in
time (the report pairs them). Run index k = repeat x len(configs) + i."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from pyscalecomm.launch import run_local
from pyscalecomm.train.config import RunConfig


def _command(items, out_dir: str, total: int) -> list[str]:
    spec = json.dumps([[i, dataclasses.asdict(c)] for i, c in items])
    return [sys.executable, "-m", "pyscalecomm.train.worker", out_dir, spec, str(total)]


def schedule(configs: list[RunConfig], repeats: int = 1) -> list[tuple[int, RunConfig]]:
    """(run index, configuration) in the order they run: the grid, once per repeat."""
    return [(r * len(configs) + i, c) for r in range(repeats) for i, c in enumerate(configs)]


def collect(configs: list[RunConfig], out_dir: str, repeats: int = 1) -> list[dict]:
    """The runs rank 0 wrote, each with its "repeat" (0-based)."""
    results = []
    for k, c in schedule(configs, repeats):
        path = os.path.join(out_dir, f"run-{k}.json")
        if os.path.exists(path):
            with open(path) as f:
                results.append(dict(json.load(f), repeat=k // len(configs)))
        else:
            print(f"# {c.label()}: no result (the job failed; see above)", file=sys.stderr)
    return results


def run(
    configs: list[RunConfig],
    out_dir: str,
    timeout: float,
    cluster_rate: str | None = None,
    repeats: int = 1,
    cpus: dict[int, float] | None = None,
) -> int:
    """Runs every configuration `repeats` times (on the emulated cluster at
    `cluster_rate`, its hosts' CPU shares `cpus`); returns the worst exit
    status of the jobs."""
    worst = 0
    jobs = schedule(configs, repeats)
    if cluster_rate is None:
        for k, c in jobs:
            command = _command([(k, c)], out_dir, len(jobs))
            code = run_local(command, c.world, timeout, f"train job of {c.world} ranks")
            worst = max(worst, code, key=abs)
        return worst
    from pyscalecomm.cluster import free_cluster

    hosts = max(c.world for c in configs)
    cpus = {h: c for h, c in (cpus or {}).items() if h < hosts}
    with free_cluster(hosts, cluster_rate, first_id=7, cpus=cpus) as cluster:
        shares = ", ".join(f"host {h} {c:g}" for h, c in sorted(cpus.items()))
        print(
            f"# emulated cluster: {hosts} hosts, one rank each, {cluster_rate} links each way"
            + (f"; CPU cores per host: {shares}" if shares else ""),
            flush=True,
        )
        for k, c in jobs:
            command = _command([(k, c)], out_dir, len(jobs))
            code = cluster.run(command, 1, timeout, out_dir, {}, hosts=c.world)
            worst = max(worst, code, key=abs)
    return worst
