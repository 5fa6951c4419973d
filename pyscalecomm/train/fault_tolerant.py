"""Fault-tolerant training under failures: torchft's Manager + DDP with
scalecomm or torchft's gloo group as the replica group, replicas killed and
restarted on a schedule (``python -m pyscalecomm.train --fault-tolerant``).

For each configuration (backend), two runs on this host, each with its own
torchft lighthouse: one without failures, then one where every
``--kill-every`` seconds one replica's process is killed (SIGKILL, the
replicas in turn) and started again at once. A kill waits until every
replica has committed a step since its last start, and none comes when the
steps left would take less than twice the longest rejoin seen so far (before
the first: the replicas' own first start, imports to first commit), so that
every restarted replica rejoins before the end.
Each replica is one process (pyscalecomm.train.ft_replica) with its own
TCPStore; torchft keeps the survivors training (quorums of at least one
replica) and heals a restarted replica from a live one's checkpoint.
torchft's settings: 2 s per collective, the lighthouse's heartbeat and join
timeouts 1 s, at least one replica per quorum.

The report, per backend: steps committed, the median step time without
failures, the failures, the survivors' longest stall after each (the longest wait for
their next committed step, from the kill until the restarted replica
commits again), a restarted replica's time back (restart to its first
committed step: its interpreter start, then the Manager, the quorum and the
checkpoint: the part after the imports is shown too), the checkpoint
transfer itself, and the final accuracy against the run without
failures; "replicas equal" says whether every replica that finished holds
the same weights.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from pyscalecomm.train.config import RunConfig

LIGHTHOUSE = dict(join_timeout_ms=1000, quorum_tick_ms=20, heartbeat_timeout_ms=1000)


def check(configs: list[RunConfig]) -> None:
    """Refuses what this mode does not run, before anything starts."""
    for c in configs:
        if c.backend not in ("scalecomm", "gloo"):
            raise ValueError(f"--fault-tolerant: backend={c.backend}: the replica group is scalecomm or gloo")
        if c.device != "cpu" or c.strategy != "allreduce" or c.compress != "none":
            raise ValueError(
                "--fault-tolerant runs DDP on the CPU, uncompressed (torchft's DDP and optimizer)"
            )


def total_steps(cfg: RunConfig, replicas: int) -> int:
    """Global steps of the run: the driver's epochs x steps per epoch for `replicas` replicas."""
    from pyscalecomm.train import data

    per_epoch = cfg.steps or max(
        1, len(data.load(cfg.data, cfg.model, cfg.samples).train_x) // (cfg.batch_size * replicas)
    )
    return cfg.epochs * per_epoch


class Replica:
    """One replica's process, restarted as needed, and the events it logged."""

    def __init__(self, index: int, spec: dict, out_dir: str):
        self.index, self.spec = index, spec
        self.events_path = os.path.join(out_dir, f"replica{index}.jsonl")
        open(self.events_path, "w").close()
        self.log = open(os.path.join(out_dir, f"replica{index}.log"), "w")  # noqa: SIM115
        self.incarnation = -1
        self.proc: subprocess.Popen | None = None
        self.events: list[dict] = []
        self.stopped = False  # killed at the end: restarted too late to heal from a live replica
        self.finished = False  # it logged "done"
        self._committed = set()  # incarnations that committed a step
        self.launched: dict[int, float] = {}  # incarnation -> time.time() of its process start
        self._offset = 0

    def start(self) -> float:
        self.incarnation += 1
        spec = dict(self.spec, replica=self.index, incarnation=self.incarnation, events=self.events_path)
        cmd = [sys.executable, "-m", "pyscalecomm.train.ft_replica", json.dumps(spec)]
        env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="ERROR")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.launched[self.incarnation] = time.time()
        return self.launched[self.incarnation]

    def kill(self) -> float:
        t = time.time()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        return t

    def read(self) -> list[dict]:
        """Events logged since the last read (a partial last line waits for the next)."""
        with open(self.events_path) as f:
            f.seek(self._offset)
            text = f.read()
        complete = text[: text.rfind("\n") + 1]
        self._offset += len(complete.encode())
        new = [json.loads(line) for line in complete.splitlines() if line.strip()]
        self.events += new
        for e in new:
            if e["event"] == "commit":
                self._committed.add(e["incarnation"])
            self.finished = self.finished or e["event"] == "done"
        return new

    def committed_since_start(self) -> bool:
        return self.incarnation in self._committed

    def done(self) -> bool:
        return self.finished


def _time_left(reps: list[Replica], steps: int) -> float:
    """Seconds the run still needs: the steps left at the pace of the last 50 commits."""
    commits = sorted((e["t"], e["step"]) for rep in reps for e in rep.events if e["event"] == "commit")
    if len(commits) < 2:
        return float("inf")
    recent = commits[-50:]
    pace = (recent[-1][0] - recent[0][0]) / max(1, recent[-1][1] - recent[0][1])
    return (steps - recent[-1][1]) * pace


def _first(rep: Replica, event: str, incarnation: int) -> float | None:
    ts = [e["t"] for e in rep.events if e["event"] == event and e["incarnation"] == incarnation]
    return min(ts) if ts else None


def _rejoin_estimate(reps: list[Replica], restarts: list[dict], go_t: float) -> float:
    """The longest restart-to-first-commit seen so far in this run; before the
    first, the longest first start: process start to imports done, plus the go
    signal (`go_t`) to the first commit (10 s while neither is known)."""
    if not restarts:
        starts = []
        for rep in reps:
            ready, commit = _first(rep, "start", 0), _first(rep, "commit", 0)
            if ready is not None and commit is not None and 0 in rep.launched:
                starts.append((ready - rep.launched[0]) + max(0.0, commit - go_t))
        return max(starts, default=10.0)
    firsts = [(_first(reps[r["replica"]], "commit", r["incarnation"]), r["t"]) for r in restarts]
    return max((c - t for c, t in firsts if c is not None), default=10.0)


def run_once(
    cfg: RunConfig, replicas: int, steps: int, kill_every: float, out_dir: str, timeout: float
) -> dict:
    """One run (failures every `kill_every` s, none if 0); returns its events and kills."""
    from torchft.coordination import LighthouseServer

    os.makedirs(out_dir, exist_ok=True)
    go = os.path.join(out_dir, "go")
    if os.path.exists(go):
        os.remove(go)
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, **LIGHTHOUSE)
    spec = dict(
        config=dataclasses.asdict(cfg),
        replicas=replicas,
        steps=steps,
        lighthouse=lighthouse.address(),
        go=go,
        timeout_s=2.0,
        quorum_timeout_s=30.0,
    )
    reps = [Replica(i, spec, out_dir) for i in range(replicas)]
    kills, restarts = [], []
    try:
        for rep in reps:
            rep.start()
        # Every replica past its imports before any Manager starts, so the first quorum holds them all.
        deadline = time.monotonic() + 120
        while not all(any(e["event"] == "start" for e in rep.events) for rep in reps):
            for rep in reps:
                rep.read()
                if rep.proc.poll() not in (None, 0):
                    raise RuntimeError(f"replica {rep.index} failed at its start: see {rep.log.name}")
            if time.monotonic() > deadline:
                raise RuntimeError("the replicas did not start within 120 s")
            time.sleep(0.05)
        open(go, "w").close()
        go_t = time.time()
        start = time.monotonic()
        next_kill, victim, finished_at = start + kill_every, 0, None
        while True:
            for rep in reps:
                rep.read()
            now = time.monotonic()
            if now - start > timeout:
                raise RuntimeError(f"the run did not finish within {timeout:g} s")
            if all((rep.done() or rep.stopped) and rep.proc.poll() is not None for rep in reps):
                break
            if any(rep.done() for rep in reps):
                finished_at = finished_at or now
                # A replica restarted too late to heal from a live one would train
                # alone from step 0: it is stopped (and shows as not finished).
                for rep in reps:
                    if not rep.committed_since_start() and rep.proc.poll() is None:
                        rep.proc.kill()
                        rep.proc.wait(timeout=30)
                        rep.stopped = True
                if now - finished_at > 60:
                    raise RuntimeError("a replica did not finish within 60 s of the first")
            for rep in reps:
                code = rep.proc.poll()
                if code not in (None, 0) and not rep.done() and not rep.stopped:
                    raise RuntimeError(f"replica {rep.index} exited with {code}: see {rep.log.name}")
            if (
                kill_every > 0
                and now >= next_kill
                and finished_at is None
                and all(rep.committed_since_start() for rep in reps)
                and _time_left(reps, steps) > 2 * _rejoin_estimate(reps, restarts, go_t)
            ):
                rep = reps[victim]
                kills.append({"t": rep.kill(), "replica": victim})
                restarts.append({"t": rep.start(), "replica": victim, "incarnation": rep.incarnation})
                victim = (victim + 1) % replicas
                next_kill = now + kill_every
            time.sleep(0.02)
    finally:
        for rep in reps:
            if rep.proc is not None and rep.proc.poll() is None:
                rep.proc.kill()
                rep.proc.wait(timeout=30)
            rep.log.close()
        lighthouse.shutdown()
    return {"events": [e for rep in reps for e in rep.events], "kills": kills, "restarts": restarts}


def _spread(xs: list[float], unit: float = 1.0, digits: int = 2) -> str:
    if not xs:
        return "-"
    v = [x * unit for x in xs]
    med = statistics.median(v)
    return (
        f"{med:.{digits}f} [{min(v):.{digits}f}-{max(v):.{digits}f}]" if len(v) > 1 else f"{med:.{digits}f}"
    )


def summarise(run: dict, steps: int) -> dict:
    """The run's figures (see the module's docstring)."""
    ev = sorted(run["events"], key=lambda e: e["t"])
    commits = [e for e in ev if e["event"] == "commit"]
    done = [e for e in ev if e["event"] == "done"]
    # Survivors' stall: the longest wait for their next commit from the kill until
    # the restarted replica's first commit (or 20 s), the kill itself included.
    lost = []
    for k, r in zip(run["kills"], run["restarts"], strict=True):
        rejoined = [
            e["t"] for e in commits if e["replica"] == r["replica"] and e["incarnation"] == r["incarnation"]
        ]
        until = min(rejoined) if rejoined else k["t"] + 20
        times = [k["t"]] + sorted(
            e["t"] for e in commits if e["replica"] != k["replica"] and k["t"] < e["t"] <= until
        )
        if len(times) > 1:
            lost.append(max(b - a for a, b in zip(times, times[1:], strict=False)))
    back, ready = [], []
    for r in run["restarts"]:
        mine = [e for e in ev if e["replica"] == r["replica"] and e["incarnation"] == r["incarnation"]]
        first = [e["t"] for e in mine if e["event"] == "commit"]
        started = [e["t"] for e in mine if e["event"] == "start"]
        if first:
            back.append(min(first) - r["t"])
            if started:
                ready.append(min(first) - min(started))
    # Step time: the gaps between one replica's consecutive commits while every replica took part.
    gaps = []
    by_replica: dict[int, list[dict]] = {}
    for e in commits:
        by_replica.setdefault(e["replica"], []).append(e)
    for cs in by_replica.values():
        for a, b in zip(cs, cs[1:], strict=False):
            if (
                b["step"] == a["step"] + 1
                and b["incarnation"] == a["incarnation"]
                and b.get("participants", 0) > 1
            ):
                gaps.append(b["t"] - a["t"])
    finished = [e for e in done if e["step"] >= steps]
    sums = {round(e["checksum"], 6) for e in finished}
    return {
        "steps": max((e["step"] for e in commits), default=0),
        "failures": len(run["kills"]),
        "step_ms": statistics.median(gaps) * 1e3 if gaps else None,
        "lost_s": lost,
        "back_s": back,
        "ready_s": ready,  # of back_s: from the end of the imports (the replica's "start")
        "heal_s": [e["seconds"] for e in ev if e["event"] == "heal"],
        "acc": statistics.median(e["acc"] for e in finished) if finished else None,
        "loss": statistics.median(e["loss"] for e in finished) if finished else None,
        "replicas_finished": len(finished),
        "replicas_equal": len(sums) == 1 if finished else None,
    }


def table(rows: list[tuple[str, dict, dict]]) -> str:
    out = [
        "| backend | steps | step ms | failures | survivors' longest stall after a kill, s "
        "| restart to first commit, s | of which after the imports, s | checkpoint transfer, ms "
        "| accuracy | without failures | Δ points "
        "| replicas equal |",
        "|---|---:|---:|---:|---|---|---|---|---:|---:|---:|---|",
    ]
    for backend, clean, failing in rows:
        acc, base = failing["acc"], clean["acc"]
        delta = f"{(acc - base) * 100:+.1f}" if acc is not None and base is not None else "-"
        step_ms = clean["step_ms"]
        out.append(
            f"| {backend} | {failing['steps']} | {'-' if step_ms is None else f'{step_ms:.1f}'} | "
            f"{failing['failures']} | {_spread(failing['lost_s'])} | {_spread(failing['back_s'])} | "
            f"{_spread(failing['ready_s'])} | "
            f"{_spread(failing['heal_s'], 1e3, 1)} | {'-' if acc is None else f'{acc:.3f}'} | "
            f"{'-' if base is None else f'{base:.3f}'} | {delta} | "
            f"{'yes' if failing['replicas_equal'] else 'NO'} ({failing['replicas_finished']} finished) |"
        )
    return "\n".join(out)


def run(configs: list[RunConfig], replicas: int, kill_every: float, out_dir: str, timeout: float) -> int:
    """Both runs of every configuration; prints the table; writes results.json. Returns 0, or 1
    if a run failed or its replicas ended with different weights."""
    rows, results, worst = [], [], 0
    for c in configs:
        steps = total_steps(c, replicas)
        label = c.backend
        print(f"# {label}: {replicas} replicas, {steps} steps, a failure every {kill_every:g} s", flush=True)
        figures = {}
        for name, every in (("without failures", 0.0), ("with failures", kill_every)):
            where = os.path.join(out_dir, f"{label}-{'clean' if every == 0 else 'failing'}")
            try:
                figures[name] = summarise(run_once(c, replicas, steps, every, where, timeout), steps)
            except RuntimeError as e:
                print(f"# {label} {name}: {e}", file=sys.stderr, flush=True)
                worst = 1
                break
            print(
                f"#   {name}: {figures[name]['steps']} steps, {figures[name]['failures']} failures",
                flush=True,
            )
        if len(figures) == 2:
            rows.append((label, figures["without failures"], figures["with failures"]))
            results.append({"backend": label, "config": dataclasses.asdict(c), **figures})
            if not figures["with failures"]["replicas_equal"]:
                worst = 1
    if rows:
        print()
        print(table(rows))
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"replicas": replicas, "kill_every_s": kill_every, "runs": results}, f, indent=1)
    print(f"\n# wrote {os.path.join(out_dir, 'results.json')}")
    return worst
