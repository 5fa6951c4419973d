"""One rank's side of the driver: training of one configuration on a process
group of the configuration's backend, with the measurements. The strategy is
DDP (allreduce) or a parameter server (pyscalecomm.ps: ps-sync, ps-async,
ps-ssp:K), with an optional straggler.

``run_configs(configs, out_dir)`` runs in every rank of a job (started by the
driver, torchrun, mpirun or srun): the default group is gloo and only
coordinates (barriers, gathering results); each configuration trains on a
group (or a parameter server's groups) of its own backend. Rank 0 writes one
JSON file per configuration.

What is measured, per configuration:
- time per epoch: the training steps only (no evaluation), from a barrier
  until the slowest rank is done;
- compute per step: forward + backward without communication (on the model
  before the strategy wraps it; a few calibration steps before training,
  gradients then discarded; the slowest rank's median) plus the optimizer
  step as timed during training;
- a model-parallel rank's compute is that of the whole model on its batch
  share divided by the model-parallel degree (the ideal split);
- step time: the slowest rank's mean;
- model state per rank: parameters, gradients and optimizer state it holds
  (the largest over ranks);
- exposed communication per step: the step time minus that compute, i.e. the
  communication that could not hide behind backward (with waiting on slower
  ranks, which is what a user pays for it);
- DDP on CPU: the compute's slowdown inside a step, from the step's start to
  the accumulation of its last gradient (the backward's end; the buckets'
  allreduces overlap it, and a codec's encoding runs in it), over the same
  compute alone; the slowest rank's median against the calibration's;
- a straggler (``--straggler``) sleeps (F-1) x that compute before its step's
  forward;
- batches: each rank takes a fixed share of every step, except under
  ps-async, whose workers draw the epoch's batches from a pool (a counter in
  the job's store), so a faster worker trains on more of them;
- per epoch: mean training loss (rank 0), test loss and accuracy;
- peak resident memory (max over ranks) and CPU use (CPU seconds / wall
  seconds per rank, averaged over ranks);
- parameter-server runs: the staleness of every applied gradient and the
  largest lead of a worker over the slowest (from the servers).
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import os
import random
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from pyscalecomm.launch import local_gpu
from pyscalecomm.train import data as data_mod
from pyscalecomm.train import models, predict, strategies
from pyscalecomm.train.config import RunConfig, parse_straggler

_RUNS = itertools.count()  # this process's runs; every rank of a job runs the same ones in the same order


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _register_hook(cfg: RunConfig, ddp, group) -> None:
    if cfg.compress == "none":
        return
    if cfg.backend == "scalecomm":
        import pyscalecomm.hooks

        pyscalecomm.hooks.register(ddp, cfg.compress)  # on ddp's group; in C++, no Python per bucket
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    name, _, arg = cfg.compress.partition(":")
    if name == "fp16":
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif name == "bf16":
        ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)
    else:  # powersgd (RunConfig.check allows nothing else)
        state = powerSGD_hook.PowerSGDState(
            process_group=group, matrix_approximation_rank=int(arg or 4), start_powerSGD_iter=2
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def _evaluate(model, d: data_mod.Data, device) -> tuple[float, float]:
    """Test loss and accuracy of ``model`` (every rank calls it: a sharded model communicates)."""
    model.eval()
    with torch.no_grad():
        logits = model(d.test_x.to(device))
        loss = nn.functional.cross_entropy(logits, d.test_y.to(device)).item()
        acc = (logits.argmax(1).cpu() == d.test_y).float().mean().item()
    model.train()
    return loss, acc


class Training:
    """One configuration trained on the current job, one job per method:
    ``__init__`` sets up (device, data, model, the step count), ``calibrate``
    times compute alone and then wraps the model in its strategy, ``epoch``
    trains and evaluates one epoch, ``summarise`` gathers every rank's
    record into the result (rank 0; None elsewhere)."""

    def __init__(self, cfg: RunConfig, progress: bool = True):
        self.cfg, self.progress = cfg, progress
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        torch.set_num_threads(cfg.threads)
        device = torch.device(cfg.device)
        self.device = local_gpu() if device.type == "cuda" else device
        self.data = d = data_mod.load(cfg.data, cfg.model, cfg.samples)
        torch.manual_seed(cfg.seed)
        self.model = models.build(cfg.model, d.input_shape, d.classes, cfg.width).to(self.device)
        self.dp, self.mp = strategies.mesh_shape(cfg.strategy, self.world, cfg.mesh)
        self.straggler, self.slow_rank, self.factor = parse_straggler(cfg.straggler)
        self.per_step = cfg.batch_size * self.world  # the global batch, whatever the strategy
        self.local = self.per_step // self.dp
        steps = len(d.train_x) // self.per_step
        if cfg.steps:
            steps = min(steps, cfg.steps) if steps else cfg.steps
        if steps == 0:
            raise ValueError(
                f"{cfg.label()}: {len(d.train_x)} training samples make no step of {cfg.batch_size} x "
                f"{self.world} ranks; lower --batch-size"
            )
        self.steps = steps
        self.epochs: list[dict] = []
        self.step_times: list[float] = []
        self.opt_times: list[float] = []
        self.batches = 0
        self.wall_train = 0.0

    def batch(self, order, s: int, share: int):
        """Share `share` of step `s` in the epoch's sample order."""
        xs, ys = self.data.train_x, self.data.train_y
        lo = (s * self.per_step + share * self.local) % len(xs)
        idx = order[lo : lo + self.local]
        return xs[idx].to(self.device), ys[idx].to(self.device)

    def calibrate(self) -> None:
        """Compute alone (no communication, on the model before the strategy
        wraps it): forward + backward of this rank's share of a step, the
        median of a few; then the strategy and the optimizer."""
        cfg, model = self.cfg, self.model
        gen = torch.Generator().manual_seed(10_000 + cfg.seed)
        order0 = torch.randperm(len(self.data.train_x), generator=gen)
        calib = [self.batch(order0, s, self.rank % self.dp) for s in range(2 + cfg.calib_steps)]

        def calib_step(k):
            model.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(calib[k][0]), calib[k][1]).backward()

        fb = predict.median_step_s(calib_step, cfg.calib_steps, sync=lambda: _sync(self.device))
        model.zero_grad(set_to_none=True)
        # A model-parallel rank computes 1/mp of it (the ideal split); a
        # straggler's delay is the same multiple on every rank.
        self.compute_fb = _agreed_max(fb / self.mp)

        def hook(ddp, group):
            _register_hook(cfg, ddp, group)

        self.share = strategies.build(cfg, model, self.device, hook, batches=calib)
        self.grad_clock = GradClock(model) if _overlaps_backward(cfg, self.device) else None
        self.dp, self.mp = self.share.mesh  # adaptive's layout is known only now
        self.local = self.per_step // self.dp
        self.opt = torch.optim.SGD(self.share.params, lr=cfg.lr, momentum=0.9) if self.share.params else None
        self.run = next(_RUNS)
        self.pool = dist.distributed_c10d._get_default_store() if self.share.pooled else None
        self.cpu0 = time.process_time()  # ns resolution; os.times() counts 10 ms ticks

    def claims(self, epoch: int):
        """This rank's batches of the epoch, as (step, share of the step):
        a fixed share of every step, or with a pool whichever batches are
        left when this rank asks (steps x shares of them in all)."""
        share = self.share
        if self.pool is None:
            yield from ((s, share.dp_rank) for s in range(self.steps))
            return
        key = f"scalecomm-train/pool/{self.run}/{epoch}"
        while (c := self.pool.add(key, 1) - 1) < self.steps * share.dp:
            yield c // share.dp, c % share.dp

    def slowed(self, epoch: int, s: int) -> bool:
        if self.straggler == "rank":
            return self.rank == self.slow_rank
        if self.straggler == "random":
            return random.Random(f"{self.cfg.seed}/{epoch}/{s}").randrange(self.world) == self.rank
        return False

    def epoch(self, epoch: int) -> None:
        """Trains one epoch (timed from a barrier until the slowest rank is
        done), then evaluates."""
        cfg, device, opt, share = self.cfg, self.device, self.opt, self.share
        gen = torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
        order = torch.randperm(len(self.data.train_x), generator=gen)
        dist.barrier()
        _sync(device)
        start = time.perf_counter()
        losses = []
        for s, (at, part) in enumerate(self.claims(epoch)):
            x, y = self.batch(order, at, part)
            self.batches += 1
            t0 = time.perf_counter()
            if self.slowed(epoch, s):  # a slower machine: its compute takes factor x as long
                time.sleep((self.factor - 1) * self.compute_fb)
            if opt is not None:
                opt.zero_grad(set_to_none=True)
            tc = time.perf_counter()
            loss = share.step(x, y)  # a parameter server's pushes go out here
            _sync(device)
            t1 = time.perf_counter()
            if self.grad_clock is not None:
                self.grad_clock.lap(tc)
            if opt is not None:  # the servers update a parameter server's parameters
                opt.step()
            _sync(device)
            t2 = time.perf_counter()
            self.step_times.append(t2 - t0)
            self.opt_times.append(t2 - t1)
            if loss is not None:
                losses.append(loss)
        # The epoch ends when its slowest rank is done (a pipeline's first
        # stage, say, finishes its sends long before the last stage).
        elapsed = _agreed_max(time.perf_counter() - start)
        self.wall_train += elapsed
        share.after_epoch()
        test_loss, acc = _evaluate(share.evaluate_model(), self.data, device)
        self.epochs.append(
            {
                "epoch": epoch + 1,
                "time_s": elapsed,
                "cum_time_s": self.wall_train,
                "loss": _mean_over_ranks(losses),
                "test_loss": test_loss,
                "acc": acc if self.data.real else None,
            }
        )
        if self.progress and self.rank == 0:
            a = f"acc {acc:.3f}" if self.data.real else "synthetic data"
            loss = self.epochs[-1]["loss"]
            print(f"    epoch {epoch + 1}/{cfg.epochs}  {elapsed:7.2f} s  loss {loss:.4f}  {a}", flush=True)

    def _mine(self) -> dict:
        """This rank's record, for the gather."""
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if self.device.type == "cuda":
            peak_mib = torch.cuda.max_memory_allocated(self.device) / 2**20
        mine = {
            "cpu_util": (time.process_time() - self.cpu0) / max(self.wall_train, 1e-9),
            "peak_mib": peak_mib,
            "state_mib": strategies.state_bytes(self.share.params, self.opt) / 2**20,
            "step_s": statistics.mean(self.step_times),
            "opt_s": statistics.mean(self.opt_times),
            "group_backends": sorted({dist.get_backend(g) for g in self.share.groups}),
            "batches": self.batches,
            "compute_in_step_s": self.grad_clock.median() if self.grad_clock else None,
        }
        if self.grad_clock is not None:
            self.grad_clock.remove()
        mine.update(self.share.close())
        return mine

    def summarise(self) -> dict | None:
        """Closes the strategy, gathers every rank's record; the result on rank 0, else None."""
        cfg, d, epochs, share = self.cfg, self.data, self.epochs, self.share
        every = [None] * self.world
        dist.all_gather_object(every, self._mine())
        auto = _auto_state(share.groups)
        chosen = _compression_choices(share.groups) if cfg.compress == "auto" else None
        for g in share.groups:
            dist.destroy_process_group(g)
        if self.rank != 0:
            return None
        served = [e["ps"] for e in every if "staleness" in e.get("ps", {})]  # the servers' records
        servers_stats = _staleness(served) if cfg.strategy.startswith("ps-") else None
        slowest = max(every, key=lambda e: e["step_s"])  # the rank the others wait for
        step_s = slowest["step_s"]
        compute_s = self.compute_fb + slowest["opt_s"]
        exposed = max(0.0, step_s - compute_s)
        timed = epochs[1:] if len(epochs) > 1 else epochs  # the first epoch carries warm-up
        epoch_s = statistics.mean(e["time_s"] for e in timed)
        fresh = models.build(cfg.model, d.input_shape, d.classes, cfg.width)
        return {
            "config": dataclasses.asdict(cfg),
            "label": cfg.label(),
            "params": sum(p.numel() for p in fresh.parameters()),
            "grad_bytes": models.param_bytes(self.model),
            "steps_per_epoch": self.steps,
            "global_batch": self.per_step,
            "mesh": list(share.mesh),
            # what its groups ran on
            "group_backends": sorted({b for e in every for b in e["group_backends"]}),
            "batches_per_rank": [e["batches"] for e in every],  # unequal where the workers draw from a pool
            "time_per_epoch_s": epoch_s,
            "samples_per_s": self.steps * self.per_step / epoch_s,
            "step_ms": 1e3 * step_s,
            "compute_ms": 1e3 * compute_s,
            "exposed_comm_ms": 1e3 * exposed,
            "comm_share": exposed / step_s if step_s > 0 else 0.0,
            "compute_slowdown": _slowdown(every, self.compute_fb),
            "peak_mem_mib": max(e["peak_mib"] for e in every),
            "state_mib": None if cfg.strategy.startswith("ps-") else max(e["state_mib"] for e in every),
            "bubble": share.bubble,
            "cpu_util": sum(e["cpu_util"] for e in every) / self.world,
            "final_loss": epochs[-1]["loss"],
            "final_test_loss": epochs[-1]["test_loss"],
            "final_acc": epochs[-1]["acc"],
            "epochs": epochs,
            "world": self.world,
            "staleness": servers_stats,
            "auto": auto,
            "compression_choices": chosen,
            "adaptive": every[0].get("adaptive"),  # the plan (the same on every rank) and what chose it
        }


def train_one(cfg: RunConfig, progress: bool = True) -> dict | None:
    """Trains cfg on the current job; returns the result on rank 0, else None."""
    training = Training(cfg, progress)
    training.calibrate()
    for epoch in range(cfg.epochs):
        training.epoch(epoch)
    return training.summarise()


def _auto_state(groups: list) -> dict | None:
    """Where scalecomm's auto stood when the run ended, over the run's groups
    (alike on every rank): the allreduce sizes it was still measuring, and
    its trial calls among all its calls. None: no group ran auto online."""
    buckets = []
    for g in groups:
        if dist.get_backend(g) != "scalecomm":
            continue
        try:
            backend = g._get_backend(torch.device("cpu"))
        except RuntimeError:  # a group for device tensors only: auto takes the model's choice there
            continue
        buckets += backend.tuning()
    if not buckets:
        return None
    return {
        "exploring_bytes": sorted({b["bytes"] for b in buckets if b["phase"] == "exploring"}),
        "trial_calls": sum(b["trials"] for b in buckets),
        "calls": sum(b["calls"] for b in buckets),
    }


def _compression_choices(groups: list) -> list[dict]:
    """compress=auto's decision per DDP bucket (alike on every rank), bucket by bucket."""
    import pyscalecomm.compress

    out = []
    for g in groups:
        if dist.get_backend(g) == "scalecomm":
            out += pyscalecomm.compress.choices(g)

    def bucket(c):
        tail = c["key"].rsplit("-", 1)[-1]
        return (int(tail) if tail.isdigit() else 1 << 30, c["key"])

    return sorted(out, key=bucket)


def _overlaps_backward(cfg: RunConfig, device) -> bool:
    """Whether the run's communication overlaps its backward on the CPU
    (DDP: the buckets' allreduces start while later layers still compute),
    so that the backward's own slowdown can be timed by the clock of its
    gradients (on a GPU that clock would time the kernels' launch)."""
    return strategies.canonical(cfg.strategy) == "allreduce" and device.type == "cpu"


class GradClock:
    """When a step's last gradient was accumulated (``last``, perf_counter):
    the end of its forward and backward compute, before DDP's end-of-backward
    wait for the buckets. ``lap(start)`` records one step's compute."""

    def __init__(self, model: nn.Module):
        self.last = 0.0
        self.laps: list[float] = []

        def stamp(_param):
            self.last = time.perf_counter()

        params = [p for p in model.parameters() if p.requires_grad]
        self.handles = [p.register_post_accumulate_grad_hook(stamp) for p in params]

    def lap(self, start: float) -> None:
        """Records the compute of the step that began at `start`."""
        if self.last > start:
            self.laps.append(self.last - start)

    def median(self) -> float | None:
        return statistics.median(self.laps) if self.laps else None

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _slowdown(every: list[dict], compute_fb: float) -> float | None:
    """The compute's time inside a step over its time alone, less 1 (the
    slowest rank's median against the calibration's slowest median); None
    where it was not timed."""
    laps = [e["compute_in_step_s"] for e in every]
    if compute_fb <= 0 or any(t is None for t in laps):
        return None
    return max(laps) / compute_fb - 1


def _mean_over_ranks(losses: list[float]) -> float:
    """The epoch's mean training loss over every rank that computed losses
    (a pipeline's last stages; every rank otherwise): the global batch's."""
    t = torch.tensor([sum(losses), len(losses)], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t[0] / t[1]) if t[1] else float("nan")


def _agreed_max(x: float) -> float:
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def _staleness(servers: list[dict]) -> dict:
    """Every server's applied gradients: how many of each staleness (versions
    applied between the read and the update), and the largest lead of a
    worker over the slowest when its pull was answered."""
    counts: dict[int, int] = {}
    for st in servers:
        for v in st["staleness"]:
            counts[v] = counts.get(v, 0) + 1
    total = sum(counts.values())
    return {
        "counts": {str(k): counts[k] for k in sorted(counts)},
        "mean": sum(k * c for k, c in counts.items()) / total if total else 0.0,
        "max": max(counts) if counts else 0,
        "max_lead": max((max(st["leads"]) for st in servers if st["leads"]), default=0),
    }


def run_configs(
    configs: list[tuple[int, RunConfig]], out_dir: str, total: int | None = None, progress: bool = True
) -> None:
    """Runs each (index, configuration) in turn on this job; rank 0 writes
    <out_dir>/run-<index>.json."""
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    for i, cfg in configs:
        if cfg.world != dist.get_world_size():
            raise SystemExit(f"{cfg.label()}: this job has {dist.get_world_size()} ranks")
        if progress and dist.get_rank() == 0:
            print(f"[{i + 1}/{total or len(configs)}] {cfg.label()}", flush=True)
        result = train_one(cfg, progress)
        if result is not None:
            with open(os.path.join(out_dir, f"run-{i}.json"), "w") as f:
                json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    # Drop the last references to the gloo group now, while the interpreter is
    # whole: its destructor joins gloo's worker threads, which otherwise may
    # release a finished work's tensors during interpreter shutdown, when
    # taking the GIL aborts the process (a torch race seen under mpirun).
    gc.collect()


def main() -> int:
    """``python -m pyscalecomm.train.worker OUT_DIR '[[index, {config}], ...]'``: used by the driver."""
    import pyscalecomm  # noqa: F401  (registers the backend; fills RANK etc. under launchers)

    out_dir, spec = sys.argv[1], sys.argv[2]
    configs = [(i, RunConfig(**c)) for i, c in json.loads(spec)]
    run_configs(configs, out_dir, int(sys.argv[3]) if len(sys.argv) > 3 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
