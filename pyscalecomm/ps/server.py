"""One server's shard and update rule, and the loop that serves one remote
worker's requests (pyscalecomm.ps)."""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

_log = logging.getLogger("pyscalecomm")

PUSH, PULL, BYE = 1, 2, 3
HEADER = 4  # int64: op, clock (pushes so far), version read, 0 | reply: version, lead, 0, 0


def parse_mode(mode: str) -> tuple[str, int]:
    """("sync"|"async"|"ssp", K) from "sync", "async" or "ssp:K"."""
    if mode in ("sync", "async"):
        return mode, 0
    name, _, k = mode.partition(":")
    if name == "ssp" and k.isdigit():
        return "ssp", int(k)
    raise ValueError(
        f"ParameterServer: mode {mode!r} is not one of sync, async, ssp:K (K >= 0 steps of lead)"
    )


@dataclass
class Reply:
    """A pull's answer: filled by the server (local) or a receive (remote)."""

    header: torch.Tensor = field(default_factory=lambda: torch.zeros(HEADER, dtype=torch.int64))
    payload: torch.Tensor | None = None
    works: list = field(default_factory=list)
    grads: bool = False  # "sum" answering a push: the mean gradient, not parameters
    ready: threading.Event = field(default_factory=threading.Event)

    def wait(self) -> None:
        for w in self.works:
            w.wait()
        if not self.works:
            self.ready.wait()


class Server:
    """One shard and its update rule. Every method runs under `lock`; replies
    to a remote worker go out on its replies group (`replies[worker]`), to
    the local one through its Reply."""

    def __init__(self, flat, keys, mode, k, workers, make_optimizer, replies, rank):
        self.lock = threading.Lock()
        self.mode, self.k, self.workers, self.rank = mode, k, workers, rank
        self.keys = keys  # parameter indices, in shard order
        self.param = nn.Parameter(flat)
        self.optimizer = make_optimizer([self.param])
        self.version = 0  # updates applied: every key's version (a shard's keys update together)
        self.clock = [0] * workers  # pushes received per worker
        self.sum = torch.zeros_like(flat)
        # "sum": the last version's mean gradient (what a push is answered with).
        self.mean = torch.zeros_like(flat)
        self.summed = 0
        self.waiting: list[int] = []  # workers whose pull is held
        self.staleness: list[int] = []
        self.leads: list[int] = []
        self.replies = replies
        self.local: Reply | None = None
        self.sends: list = []  # (worker, work) of the replies in flight
        self.outbox: dict = {}  # worker -> (payload, work) of its last reply
        self.error: BaseException | None = None
        self.live = set(range(workers))
        self.dropped: dict[int, str] = {}  # worker -> why

    def _low(self) -> int:
        """The slowest live worker's pushes."""
        return min(self.clock[w] for w in self.live)

    def push(self, worker: int, read_version: int, grad: torch.Tensor) -> None:
        self.clock[worker] += 1
        if self.mode == "sync":
            self.sum += grad
            self.summed += 1
            self.waiting.append(worker)
            if self.summed == self.workers:
                self._apply(self.sum / self.workers)
                self.staleness.extend([0] * self.workers)
                self.sum.zero_()
                self.summed = 0
                self._release(self.waiting)
            return
        self.staleness.append(self.version - read_version)
        self._apply(grad.div_(self.workers))  # a push's gradient is the server's to consume
        self.waiting.append(worker)
        self._release_within_bound()

    def _release_within_bound(self) -> None:
        low = self._low()
        ready = [w for w in self.waiting if self.mode == "async" or self.clock[w] - low <= self.k]
        self._release(ready)

    def drop(self, worker: int, why: str) -> None:
        """async/ssp: stops counting `worker` (its requests failed); the pulls
        its absence held are answered."""
        self.live.discard(worker)
        self.dropped[worker] = why
        if worker in self.waiting:
            self.waiting.remove(worker)
        self._release_within_bound()  # the server's own worker is always live

    def pull(self, worker: int) -> None:
        self._release([worker], answer=self.param.data, record=False)

    def _apply(self, grad: torch.Tensor) -> None:
        if self.optimizer is None:  # "sum": the worker steps; the mean gradient is the answer
            self.mean.copy_(grad)
        else:
            self.param.grad = grad
            self.optimizer.step()
            self.param.grad = None
        self.version += 1

    def _release(self, workers: list[int], answer: torch.Tensor | None = None, record: bool = True) -> None:
        """Answers these workers' pulls: the shard (or, for "sum", the mean
        gradient), with the version and the worker's lead over the slowest."""
        if answer is None:
            answer = self.mean if self.optimizer is None else self.param.data
        low = self._low()
        for w in list(workers):
            if w in self.waiting:
                self.waiting.remove(w)
            lead = self.clock[w] - low
            if record:
                self.leads.append(lead)
            header = torch.tensor([self.version, lead, 0, 0], dtype=torch.int64)
            if w == self.rank and self.local is not None:
                self.local.header.copy_(header)
                if self.local.payload is not None and self.local.payload.shape == answer.shape:
                    self.local.payload.copy_(answer)
                else:
                    self.local.payload = answer.clone()
                self.local.ready.set()
                continue
            # A copy: the update after this one must not change what is sent.
            # The worker's last reply buffer is reused once its send is done.
            last = self.outbox.get(w)
            if last is not None and last[1].is_completed():
                payload = last[0].copy_(answer)
            else:
                payload = answer.clone()
            head = dist.isend(header, dst=w, group=self.replies[w])  # first: the worker receives it first
            work = dist.isend(payload, dst=w, group=self.replies[w])
            self.outbox[w] = (payload, work)
            self.sends += [(w, head), (w, work)]
        if len(self.sends) > 64:
            self.sends = [(w, s) for w, s in self.sends if not s.is_completed()]

    def finish_sends(self) -> None:
        """Waits for the replies in flight, except to dropped workers."""
        for w, work in self.sends:
            if w not in self.dropped:
                work.wait()
        self.sends = []

    def serve(self, worker: int, group, receive: Callable[[int], torch.Tensor]) -> None:
        """Serves remote `worker`'s requests on its request `group` until its
        BYE (a thread of its own). `receive(clock)` reads a push's gradient
        off the group, into a buffer this loop owns, consumed under the lock."""
        try:
            while True:
                header = torch.empty(HEADER, dtype=torch.int64)
                dist.recv(header, src=worker, group=group)
                op, clock, read_version = (int(x) for x in header[:3])
                if op == BYE:
                    return
                grad = receive(clock) if op == PUSH else None
                with self.lock:
                    if self.error is not None:
                        return
                    if op == PUSH:
                        self.push(worker, read_version, grad)
                    else:
                        self.pull(worker)
        except BaseException as e:  # noqa: BLE001 - reported to the worker thread
            with self.lock:
                self._fail(worker, group, e)

    def _fail(self, worker: int, group, e: BaseException) -> None:
        """`worker`'s requests failed: under async and ssp it is dropped and
        training goes on; under sync the server fails (lock held)."""
        if self.mode != "sync" and worker in self.live:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            why += f" (the worker is rank {dist.get_group_rank(group, worker)} of its request group)"
            self.drop(worker, why)
            _log.warning(
                "ParameterServer (server rank %d, mode %s): dropped worker rank %d, whose requests "
                "failed: %s. Training goes on with the %d live workers",
                self.rank,
                self.mode if self.mode != "ssp" else f"ssp:{self.k}",
                worker,
                why,
                len(self.live),
            )
            return
        self.error = RuntimeError(f"worker rank {worker}'s requests failed: {e}")
        self.error.__cause__ = e
        if self.local is not None:
            self.local.ready.set()

    def state(self) -> dict:
        return {
            "shard": self.param.data.clone(),
            "version": self.version,
            "clock": list(self.clock),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None,
        }

    def load(self, state: dict) -> None:
        self.param.data.copy_(state["shard"])
        self.version = state["version"]
        self.clock = list(state["clock"])
        if self.optimizer is not None and state["optimizer"] is not None:
            self.optimizer.load_state_dict(state["optimizer"])


def optimizer_factory(optimizer: str, lr: float, momentum: float, weight_decay: float, nesterov: bool, betas):
    if optimizer == "sgd":
        return lambda ps: torch.optim.SGD(
            ps, lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov
        )
    if optimizer == "adam":
        return lambda ps: torch.optim.Adam(ps, lr=lr, betas=betas, weight_decay=weight_decay)
    if optimizer == "sum":
        return lambda ps: None
    raise ValueError(f"ParameterServer: optimizer {optimizer!r} is not one of sgd, adam, sum")
