"""Runs the driver's configurations, each as a job of its own (fresh
processes: peak memory, threads and allocator state belong to that
configuration alone, and a failed configuration does not stop the sweep),
either as local processes or inside an emulated cluster (pyscalecomm.cluster:
one rank per host on rate-limited links). Returns the results that rank 0
wrote."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from pyscalecomm.launch import _free_port, wait_ranks
from pyscalecomm.train.config import RunConfig


def _command(items, out_dir: str, total: int) -> list[str]:
    spec = json.dumps([[i, dataclasses.asdict(c)] for i, c in items])
    return [sys.executable, "-m", "pyscalecomm.train.worker", out_dir, spec, str(total)]


def _local(world: int, command: list[str], timeout: float) -> int:
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS="1",
        )
        procs.append(subprocess.Popen(command, env=env))
    return wait_ranks(procs, timeout, f"train job of {world} ranks")


def collect(configs: list[RunConfig], out_dir: str) -> list[dict]:
    results = []
    for i, c in enumerate(configs):
        path = os.path.join(out_dir, f"run-{i}.json")
        if os.path.exists(path):
            with open(path) as f:
                results.append(json.load(f))
        else:
            print(f"# {c.label()}: no result (the job failed; see above)", file=sys.stderr)
    return results


def run(configs: list[RunConfig], out_dir: str, timeout: float, cluster_rate: str | None = None) -> int:
    """Runs every configuration; returns the worst exit status of the jobs."""
    worst = 0
    if cluster_rate is None:
        for i, c in enumerate(configs):
            code = _local(c.world, _command([(i, c)], out_dir, len(configs)), timeout)
            worst = max(worst, code, key=abs)
        return worst
    from pyscalecomm.cluster import Cluster

    hosts = max(c.world for c in configs)
    with Cluster(hosts, cluster_rate, cluster_id=7) as cluster:
        print(f"# emulated cluster: {hosts} hosts, one rank each, {cluster_rate} links each way", flush=True)
        for i, c in enumerate(configs):
            command = _command([(i, c)], out_dir, len(configs))
            code = cluster.run(command, 1, timeout, out_dir, {}, hosts=c.world)
            worst = max(worst, code, key=abs)
    return worst
