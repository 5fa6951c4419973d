"""One replica of a fault-tolerant run (pyscalecomm.train.fault_tolerant).

    python -m pyscalecomm.train.ft_replica SPEC_JSON

A replica is one process: a torchft Manager (its own TCPStore, the run's
lighthouse) with the replica group's process group (scalecomm's or
torchft's gloo, in torchft's error-swallowing wrapper), and torchft's DDP
and optimizer wrapper over the driver's model and data. It trains until the
run's step count is committed, then evaluates.

It appends one JSON line per event to ``<events>`` (the run reads them while
it runs): ``start`` (after the imports, before the Manager), ``commit`` (each
committed step: its number, the participants), ``heal`` (a checkpoint
received from a live replica: the transfer's seconds), ``done`` (the final
step, loss, accuracy and a checksum of the weights). Every line carries the
wall time ``t`` and the process's incarnation (0 at the start, one more at
each restart).

Batches: replica r of R takes, at global step s, the slice (s x R + r) of a
fixed permutation of the training set, so a restarted replica continues
where its step says, and the replicas of a step see different samples.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.nn.functional as F

from pyscalecomm.train import data as data_mod
from pyscalecomm.train import models
from pyscalecomm.train.config import RunConfig


class Events:
    """The replica's event log: one JSON object a line, flushed at once."""

    def __init__(self, path: str, incarnation: int, replica: int):
        self.f = open(path, "a")  # noqa: SIM115 - open for the process's life
        self.incarnation, self.replica = incarnation, replica

    def __call__(self, event: str, **fields) -> None:
        record = {"event": event, "t": time.time(), "replica": self.replica, "incarnation": self.incarnation}
        self.f.write(json.dumps({**record, **fields}) + "\n")
        self.f.flush()


def timed_transport(inner, log: Events):
    """torchft's checkpoint transport `inner`, logging each received checkpoint's transfer time."""
    from torchft.checkpointing.transport import CheckpointTransport

    class Timed(CheckpointTransport):
        def metadata(self):
            return inner.metadata()

        def send_checkpoint(self, dst_ranks, step, state_dict, timeout):
            return inner.send_checkpoint(dst_ranks, step, state_dict, timeout)

        def disallow_checkpoint(self):
            return inner.disallow_checkpoint()

        def recv_checkpoint(self, src_rank, metadata, step, timeout):
            start = time.perf_counter()
            out = inner.recv_checkpoint(src_rank, metadata, step, timeout)
            log("heal", step=step, seconds=time.perf_counter() - start)
            return out

        def shutdown(self, wait: bool = True):
            return inner.shutdown(wait)

    return Timed()


def process_group(backend: str, timeout: timedelta):
    if backend == "scalecomm":
        from pyscalecomm.torchft import ProcessGroupScalecomm

        return ProcessGroupScalecomm(timeout=timeout)
    from torchft.process_group import ProcessGroupGloo

    return ProcessGroupGloo(timeout=timeout)


def _wait_for(path: str, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise SystemExit(f"replica: the run did not start within {seconds:g} s ({path} never appeared)")
        time.sleep(0.02)


def main(argv=None) -> int:
    spec = json.loads((argv or sys.argv[1:])[0])
    cfg = RunConfig(**spec["config"])
    r, replicas, steps = spec["replica"], spec["replicas"], spec["steps"]
    log = Events(spec["events"], spec["incarnation"], r)
    torch.set_num_threads(cfg.threads)
    import torchft
    from torch.distributed import TCPStore
    from torchft.checkpointing.http_transport import HTTPTransport
    from torchft.process_group import ErrorSwallowingProcessGroupWrapper

    import pyscalecomm  # noqa: F401  (registers the backend)

    d = data_mod.load(cfg.data, cfg.model, cfg.samples)
    torch.manual_seed(cfg.seed)
    model = models.build(cfg.model, d.input_shape, d.classes, cfg.width)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    order = torch.randperm(len(d.train_x), generator=torch.Generator().manual_seed(cfg.seed))
    log("start")
    _wait_for(spec["go"], 120)

    timeout = timedelta(seconds=spec["timeout_s"])
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = torchft.Manager(
        # torchft's DDP hook fails when the group's wait() raises, as gloo's and ours
        # do when a peer dies mid-allreduce: the wrapper hands the error to the
        # Manager instead, which skips the step.
        pg=ErrorSwallowingProcessGroupWrapper(process_group(cfg.backend, timeout)),
        min_replica_size=1,
        load_state_dict=lambda sd: (model.load_state_dict(sd["model"]), opt.load_state_dict(sd["optim"])),
        state_dict=lambda: {"model": model.state_dict(), "optim": opt.state_dict()},
        replica_id=f"replica{r}",
        store_addr="127.0.0.1",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=spec["lighthouse"],
        timeout=timeout,
        quorum_timeout=timedelta(seconds=spec["quorum_timeout_s"]),
        connect_timeout=timedelta(seconds=10),
        checkpoint_transport=timed_transport(HTTPTransport(timeout=timeout, num_chunks=0), log),
    )
    net = torchft.DistributedDataParallel(manager, model)
    optim = torchft.Optimizer(manager, opt)
    b = cfg.batch_size
    while manager.current_step() < steps:
        step = manager.current_step()
        start = ((step * replicas + r) * b) % max(1, len(order) - b)
        idx = order[start : start + b]
        optim.zero_grad()  # starts the step's quorum
        F.cross_entropy(net(d.train_x[idx]), d.train_y[idx]).backward()
        optim.step()  # commits unless the step's allreduce failed
        if manager.current_step() > step:
            log("commit", step=manager.current_step(), participants=manager.num_participants())
    model.eval()
    with torch.no_grad():
        logits = model(d.test_x)
        test_loss = F.cross_entropy(logits, d.test_y).item()
        acc = (logits.argmax(1) == d.test_y).float().mean().item()
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    log("done", step=manager.current_step(), loss=test_loss, acc=acc, checksum=checksum)
    manager.shutdown(wait=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
