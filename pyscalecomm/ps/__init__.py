"""A parameter server: sharded push/pull with sync, async and stale-synchronous
consistency, used from a training loop like DDP.

    model = pyscalecomm.ps.ParameterServer(net, servers=2, mode="ssp:4", optimizer="sgd", lr=0.1)
    for x, y in loader:
        loss_fn(model(x), y).backward()  # pushes the gradients as backward produces them
    model.close()

Roles. Every rank of the group is a worker; ranks ``0..servers-1`` (or the
list given) also serve, on a thread of their own. Keys are the model's
parameters, each held by one server (largest first onto the least loaded
server, so shards balance by size). A server keeps its shard as one flat
float32 tensor, a version per key (the updates applied to it) and the
update rule's state: ``sgd`` (momentum, weight decay, nesterov) or ``adam``
(torch.optim on the shard), or ``sum`` (the server averages the gradients
and returns them; the worker's own optimizer steps).

Consistency (``mode``):
- ``sync``: a version takes every worker's gradient (their mean, as
  allreduce SGD); a worker's pull waits for it. Equals DDP within float
  tolerance.
- ``async``: each gradient is applied on arrival (scaled by 1/workers, so a
  round of pushes moves the parameters as one synchronous step would); the
  pull returns the shard at once.
- ``ssp:K``: applied on arrival as async, but no worker starts a step more
  than K steps ahead of the slowest: its pull waits until the slowest has
  pushed enough.
Every applied gradient's staleness (versions applied since the worker read
the parameters it computed it on) and every released pull's lead over the
slowest worker are recorded (``stats()``).

Wire. Per server and remote worker two groups of those two ranks:
requests (the worker sends, one thread of the server receives) and replies
(the server sends). Each group has one sender and one receiver side per
process, so a rank that serves and works never queues its worker's
messages behind its server's wait, and a worker's death touches only its
own pair of groups. A worker's own server is called directly. Pushes go out while
backward runs (a post-accumulate hook per parameter, the rest at the end of
backward); the pull for the next step is asked with the push and waited for
at the next forward. Pushes may be encoded with a codec (``compression``),
with error feedback per shard.

Memory. A worker keeps each shard's float32 parameters as views of one flat
buffer, and has a spare of the same size: a pull lands in the spare, and
taking it makes the spare the parameters' storage (``p.data``) and the old
storage the next spare, so no step copies the parameters. Hold a copy, not a
view, of a parameter across steps (``state_dict()`` returns copies).
Parameters of other dtypes are copied in. A server reuses its receive
buffer per worker and a worker's reply buffer once its last reply is sent.

Faults. Under ``async`` and ``ssp:K`` a worker whose requests fail (its
process died, its links closed, or it sent nothing for the group's timeout)
is dropped by every server, which says so once (log warning, ``stats()``
``dropped``); the slowest-worker bound then counts the live workers only,
and training goes on. Under ``sync`` a version needs every worker, so a dead
worker ends the others with an error naming it. A dead server ends every
worker with an error naming it: its shard is gone.

CPU tensors; parameters are exchanged as float32.
"""

from __future__ import annotations

import copy
import logging
import threading
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

import pyscalecomm
from pyscalecomm import _C

_log = logging.getLogger("pyscalecomm")

PUSH, PULL, BYE = 1, 2, 3
_HEADER = 4  # int64: op, clock (pushes so far), version read, 0 | reply: version, lead, 0, 0


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


def assign_keys(sizes: list[int], servers: int) -> list[int]:
    """The server of each key: largest first onto the least loaded server
    (ties to the lower server), so shards balance by size."""
    load = [0] * servers
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        s = min(range(servers), key=lambda s: (load[s], s))
        owner[i] = s
        load[s] += sizes[i]
    return owner


@dataclass
class _Reply:
    """A pull's answer: filled by the server (local) or a receive (remote)."""

    header: torch.Tensor = field(default_factory=lambda: torch.zeros(_HEADER, dtype=torch.int64))
    payload: torch.Tensor | None = None
    works: list = field(default_factory=list)
    grads: bool = False  # "sum" answering a push: the mean gradient, not parameters
    ready: threading.Event = field(default_factory=threading.Event)

    def wait(self) -> None:
        for w in self.works:
            w.wait()
        if not self.works:
            self.ready.wait()


class _Server:
    """One shard and its update rule. Every method runs under `lock`; replies
    to a remote worker go out on its replies group (`replies[worker]`), to
    the local one through its _Reply."""

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
        self.local: _Reply | None = None
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


def _optimizer_factory(
    optimizer: str, lr: float, momentum: float, weight_decay: float, nesterov: bool, betas
):
    if optimizer == "sgd":
        return lambda ps: torch.optim.SGD(
            ps, lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov
        )
    if optimizer == "adam":
        return lambda ps: torch.optim.Adam(ps, lr=lr, betas=betas, weight_decay=weight_decay)
    if optimizer == "sum":
        return lambda ps: None
    raise ValueError(f"ParameterServer: optimizer {optimizer!r} is not one of sgd, adam, sum")


class ParameterServer(nn.Module):
    """Wraps ``module`` for parameter-server training on ``group`` (default:
    the default group; every rank calls this with the same arguments).

    ``servers``: how many ranks serve (ranks 0..S-1) or which. ``mode``:
    ``sync``, ``async`` or ``ssp:K``. ``optimizer``: ``sgd``, ``adam`` (run
    by the servers with ``lr``, ``momentum``, ``weight_decay``, ``nesterov``,
    ``betas``) or ``sum`` (sync only: after backward, ``sync_gradients()``
    puts the mean gradient in each ``.grad`` for the caller's optimizer).
    ``backend``: of the request and reply groups (default: the group's).
    ``compression``: a codec for the pushes (``fp16``, ``bf16``,
    ``topk:0.01``, ``randomk:0.01``, ``qsgd:8``, ``sign``: docs/compression.md);
    with ``error_feedback`` each worker adds what its codec dropped from a
    shard to that shard's next push."""

    def __init__(
        self,
        module: nn.Module,
        servers: int | list[int] = 1,
        mode: str = "sync",
        optimizer: str = "sgd",
        lr: float = 0.01,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        betas: tuple[float, float] = (0.9, 0.999),
        group=None,
        backend: str | None = None,
        compression: str | None = None,
        error_feedback: bool = True,
    ):
        super().__init__()
        self.module = module
        self.mode, self.k = parse_mode(mode)
        if optimizer == "sum" and self.mode != "sync":
            raise ValueError("ParameterServer: optimizer 'sum' (the worker steps) needs mode 'sync'")
        group = group or dist.group.WORLD
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        ranks = dist.get_process_group_ranks(group)
        if ranks != list(range(self.world)):
            raise ValueError("ParameterServer: the group must be ranks 0..world-1 of the default group")
        self.server_ranks = list(range(servers)) if isinstance(servers, int) else sorted(set(servers))
        if not self.server_ranks or any(s < 0 or s >= self.world for s in self.server_ranks):
            raise ValueError(
                f"ParameterServer: servers={servers!r} on a group of {self.world} ranks: give "
                f"1..{self.world} or a list of ranks in 0..{self.world - 1}"
            )
        self.params = [p for p in module.parameters() if p.requires_grad]
        if any(p.device.type != "cpu" for p in self.params):
            raise ValueError("ParameterServer: CPU parameters only (move the module to the CPU)")
        self.sum_mode = optimizer == "sum"
        sizes = [p.numel() for p in self.params]
        owner = assign_keys(sizes, len(self.server_ranks))
        self.shards = [[i for i in range(len(sizes)) if owner[i] == s] for s in range(len(self.server_ranks))]
        self.shard_numel = [sum(sizes[i] for i in keys) for keys in self.shards]
        self.shard_of = owner
        # Per shard: a flat float32 buffer its parameters are views of (None
        # where one is not float32), and a spare of its size that the next
        # pull lands in; taking the pull swaps the two, so no copy.
        self.flat = [self._flatten(s) for s in range(len(self.shards))]
        self.spare = [None if f is None else torch.empty_like(f) for f in self.flat]
        make = _optimizer_factory(optimizer, lr, momentum, weight_decay, nesterov, betas)
        self.compression = compression if compression not in (None, "", "none") else None
        # Per shard: the encoded push's dtype and bytes (fixed by the codec and the shard's size).
        self.wire: list[tuple[torch.dtype, int]] = []
        if self.compression:
            if self.compression.startswith("powersgd"):
                raise ValueError("ParameterServer: powersgd takes two rounds per push; choose another codec")
            for n in self.shard_numel:
                _, payload, nbytes, _ = _C.codec_roundtrip(torch.zeros(max(n, 1)), self.compression)
                self.wire.append((payload.dtype, nbytes))
        self.residual = (
            [torch.zeros(n) for n in self.shard_numel] if self.compression and error_feedback else None
        )
        self.pushed_bytes = 0  # this worker's, as sent (encoded where compressed)
        backend = backend or dist.get_backend(group)
        options = None
        if backend == "scalecomm":  # point-to-point only: fixed algorithms, so no cost-model probe
            options = pyscalecomm.Options(algorithm="allreduce:ring,broadcast:chain,reduce:chain")
        # Per server s and remote worker w: requests[s][w] and replies[s][w],
        # groups of those two ranks. Every rank creates every group, in the
        # same order; a rank keeps those it belongs to.
        self.requests: list[dict] = [{} for _ in self.server_ranks]
        self.replies: list[dict] = [{} for _ in self.server_ranks]
        for s, server in enumerate(self.server_ranks):
            for w in range(self.world):
                if w == server:
                    continue
                for table in (self.requests, self.replies):
                    g = dist.new_group(ranks=[server, w], backend=backend, pg_options=options)
                    if self.rank in (server, w):
                        table[s][w] = g
        self.server: _Server | None = None
        self.threads: list[threading.Thread] = []
        if self.rank in self.server_ranks:
            s = self.server_ranks.index(self.rank)
            flat = self._pack(s, grads=False)
            self.server = _Server(
                flat, self.shards[s], self.mode, self.k, self.world, make, self.replies[s], self.rank
            )
            for w in self.requests[s]:  # one thread per remote worker
                t = threading.Thread(target=self._serve, args=(s, w), daemon=True, name=f"scalecomm-ps-{w}")
                t.start()
                self.threads.append(t)
        self.clock = 0
        self.read_version = [0] * len(self.server_ranks)
        self.pending: list[_Reply | None] = [None] * len(self.server_ranks)
        self.pushed = [False] * len(self.server_ranks)
        self.ready_count = [0] * len(self.server_ranks)
        self.sends: list = []
        self.closed = False
        self.hooks = [
            p.register_post_accumulate_grad_hook(self._grad_ready(i)) for i, p in enumerate(self.params)
        ]
        self.end_queued = False
        for s in range(len(self.server_ranks)):
            self._request(s, PULL, None)
        self._wait_pulls(sum_mode_grads=False)

    # -- the worker's side ---------------------------------------------------

    def forward(self, *args, **kwargs):
        self._wait_pulls(sum_mode_grads=False)
        return self.module(*args, **kwargs)

    def refresh(self) -> None:
        """Waits for the pulls in flight and puts their parameters in the
        module (the next forward does this anyway; for evaluation)."""
        self._wait_pulls(sum_mode_grads=False)

    def sync_gradients(self) -> None:
        """``optimizer="sum"``: waits for the servers' mean gradients and puts
        them in each parameter's ``.grad``."""
        if not self.sum_mode:
            raise RuntimeError("ParameterServer.sync_gradients: only with optimizer='sum'")
        self._wait_pulls(sum_mode_grads=True)

    def _grad_ready(self, i: int):
        def hook(p):
            if not self.end_queued:
                self.end_queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
            s = self.shard_of[i]
            self.ready_count[s] += 1
            if self.ready_count[s] == len(self.shards[s]):
                self._push(s)

        return hook

    def _end_of_backward(self) -> None:
        # Parameters that took no gradient this step count as zero.
        for s in range(len(self.server_ranks)):
            if not self.pushed[s]:
                self._push(s)
        self.clock += 1
        self.end_queued = False
        self.pushed = [False] * len(self.server_ranks)
        self.ready_count = [0] * len(self.server_ranks)

    def _flatten(self, s: int) -> torch.Tensor | None:
        params = [self.params[i] for i in self.shards[s]]
        if any(p.dtype != torch.float32 for p in params):
            return None
        flat = self._pack(s, grads=False)
        self._place(s, flat)
        return flat

    def _place(self, s: int, flat: torch.Tensor) -> None:
        """Makes shard s's parameters views of `flat` (its layout)."""
        at = 0
        for i in self.shards[s]:
            p = self.params[i]
            p.data = flat[at : at + p.numel()].view_as(p)
            at += p.numel()

    def _pack(self, s: int, grads: bool) -> torch.Tensor:
        parts = []
        for i in self.shards[s]:
            p = self.params[i]
            t = p.grad if grads else p.detach()
            if t is None:
                t = torch.zeros_like(p)
            parts.append(t.detach().reshape(-1).to(torch.float32))
        return torch.cat(parts) if parts else torch.zeros(0)

    def _push(self, s: int) -> None:
        if self.pending[s] is not None:  # the last pull: two backwards without a forward between
            self._await(s, self.pending[s])
            self._take(s, self.pending[s], sum_mode_grads=False)
        grad = self._pack(s, grads=True)
        for i in self.shards[s]:
            self.params[i].grad = None
        self.pushed[s] = True
        payload = None
        if self.compression and grad.numel() > 0:
            if self.residual is not None:
                grad = grad + self.residual[s]
            spec, seed = self.compression, self.clock  # the server decodes with the header's clock
            decoded, payload, _, _ = _C.codec_roundtrip(grad, spec, seed=seed, rank=self.rank)
            if self.residual is not None:
                self.residual[s] = grad - decoded
            grad = decoded  # what the server applies
            payload = payload.reshape(-1).view(torch.uint8)
        self.pushed_bytes += payload.numel() if payload is not None else 4 * grad.numel()
        self._request(s, PUSH, grad, payload)

    def _request(self, s: int, op: int, grad: torch.Tensor | None, payload: torch.Tensor | None = None):
        server = self.server_ranks[s]
        reply = _Reply(grads=self.sum_mode and op == PUSH)
        reply.payload, self.spare[s] = self.spare[s], None
        self.pending[s] = reply
        if server == self.rank:
            with self.server.lock:
                # Under the lock the server thread fails with: a request made
                # after its failure must not wait for an answer that never comes.
                self._check_server()
                self.server.local = reply
                if op == PUSH:
                    self.server.push(self.rank, self.read_version[s], grad)
                else:
                    self.server.pull(self.rank)
            return
        header = torch.tensor([op, self.clock, self.read_version[s], 0], dtype=torch.int64)
        requests, replies = self.requests[s][self.rank], self.replies[s][self.rank]
        self.sends.append(dist.isend(header, dst=server, group=requests))
        if grad is not None:
            wire = payload if payload is not None else grad
            self.sends.append(dist.isend(wire, dst=server, group=requests))
        if reply.payload is None:
            reply.payload = torch.empty(self.shard_numel[s])
        reply.works = [
            dist.irecv(reply.header, src=server, group=replies),
            dist.irecv(reply.payload, src=server, group=replies),
        ]
        if len(self.sends) > 64:
            self.sends = [w for w in self.sends if not w.is_completed()]

    def _wait_pulls(self, sum_mode_grads: bool) -> None:
        for s, reply in enumerate(self.pending):
            if reply is not None:
                self._await(s, reply)
                self._take(s, reply, sum_mode_grads)
        self._check_server()

    def _await(self, s: int, reply: _Reply) -> None:
        server = self.server_ranks[s]
        try:
            reply.wait()
        except Exception as e:
            raise RuntimeError(
                f"ParameterServer (rank {self.rank}): server rank {server} did not answer: {e}. It died or "
                f"failed, and training cannot go on without its shard: restart the job (from a checkpoint "
                f"of state_dict() on every rank)"
            ) from e
        if server == self.rank:
            self._check_server()

    def _check_server(self) -> None:
        if self.server is not None and self.server.error is not None:
            raise RuntimeError(
                f"ParameterServer (rank {self.rank}): this rank's server failed: {self.server.error}"
            ) from self.server.error

    def _take(self, s: int, reply: _Reply, sum_mode_grads: bool) -> None:
        self.pending[s] = None
        self.read_version[s] = int(reply.header[0])
        flat = self.flat[s]
        if flat is not None and not reply.grads:  # the reply becomes the parameters' storage
            self._place(s, reply.payload)
            self.flat[s], self.spare[s] = reply.payload, flat
            return
        if flat is not None:
            self.spare[s] = reply.payload  # copied out below
        at = 0
        with torch.no_grad():
            for i in self.shards[s]:
                p = self.params[i]
                n = p.numel()
                chunk = reply.payload[at : at + n].view_as(p).to(p.dtype)
                at += n
                if not reply.grads:
                    p.copy_(chunk)
                elif sum_mode_grads:
                    p.grad = chunk.clone()

    # -- the server's side ---------------------------------------------------

    def _serve(self, s: int, worker: int) -> None:
        """Serves one remote worker's requests until its BYE."""
        server = self.server
        group = self.requests[s][worker]
        grad_buf = torch.empty(self.shard_numel[s])  # a push's gradient, consumed under the lock
        try:
            while True:
                header = torch.empty(_HEADER, dtype=torch.int64)
                dist.recv(header, src=worker, group=group)
                op, clock, read_version = (int(x) for x in header[:3])
                if op == BYE:
                    return
                grad = None
                if op == PUSH and self.compression and self.shard_numel[s] > 0:
                    dtype, nbytes = self.wire[s]
                    payload = torch.empty(nbytes, dtype=torch.uint8)
                    dist.recv(payload, src=worker, group=group)
                    grad = grad_buf.zero_()
                    _C.codec_decode_add(grad, payload.view(dtype), self.compression, seed=clock)
                elif op == PUSH:
                    grad = grad_buf
                    dist.recv(grad, src=worker, group=group)
                with server.lock:
                    if server.error is not None:
                        return
                    if op == PUSH:
                        server.push(worker, read_version, grad)
                    else:
                        server.pull(worker)
        except BaseException as e:  # noqa: BLE001 - reported to the worker thread
            with server.lock:
                if self.mode != "sync" and worker in server.live:
                    why = str(e).splitlines()[0] if str(e) else type(e).__name__
                    why += f" (the worker is rank {dist.get_group_rank(group, worker)} of its request group)"
                    server.drop(worker, why)
                    _log.warning(
                        "ParameterServer (server rank %d, mode %s): dropped worker rank %d, whose requests "
                        "failed: %s. Training goes on with the %d live workers",
                        self.rank,
                        self.mode if self.mode != "ssp" else f"ssp:{self.k}",
                        worker,
                        why,
                        len(server.live),
                    )
                    return
                server.error = RuntimeError(f"worker rank {worker}'s requests failed: {e}")
                server.error.__cause__ = e
                if server.local is not None:
                    server.local.ready.set()

    # -- the rest ------------------------------------------------------------

    def stats(self) -> dict:
        """This rank's record: the bytes its worker pushed (encoded, where
        compressed) and, where it serves, its server's: the staleness of
        every applied gradient, the lead over the slowest worker of every
        answered pull, its version, the pushes per worker and its shard."""
        out = {"pushed_bytes": self.pushed_bytes, "steps": self.clock}
        if self.server is not None:
            with self.server.lock:
                out.update(
                    version=self.server.version,
                    staleness=list(self.server.staleness),
                    leads=list(self.server.leads),
                    pushes=list(self.server.clock),
                    dropped=dict(self.server.dropped),
                    keys=len(self.server.keys),
                    numel=self.server.param.numel(),
                )
        return out

    def state_dict(self, *args, **kwargs):
        """A copy of the module's parameters as last pulled, and of this
        rank's shard (parameters, versions, pushes per worker, the update
        rule's state)."""
        self._wait_pulls(sum_mode_grads=False)
        state = {
            "module": {k: v.clone() for k, v in self.module.state_dict().items()},
            "clock": self.clock,
            "read_version": list(self.read_version),
        }
        if self.server is not None:
            with self.server.lock:
                state["server"] = self.server.state()
        return state

    def load_state_dict(self, state, strict: bool = True):
        """Restores what state_dict() returned on this rank (call on every
        rank; then pulls the restored shards)."""
        self._wait_pulls(sum_mode_grads=False)
        dist.barrier()
        self.module.load_state_dict(state["module"], strict=strict)
        self.clock = state["clock"]
        self.read_version = list(state["read_version"])
        if self.server is not None:
            with self.server.lock:
                self.server.load(state["server"])
        dist.barrier()
        for s in range(len(self.server_ranks)):
            self._request(s, PULL, None)
        self._wait_pulls(sum_mode_grads=False)

    def close(self) -> None:
        """Waits for this rank's last pulls, tells every server it is done,
        and ends this rank's server once every worker has."""
        if self.closed:
            return
        self.closed = True
        self._wait_pulls(sum_mode_grads=False)
        for h in self.hooks:
            h.remove()
        for s, server in enumerate(self.server_ranks):
            if server != self.rank:
                self.sends.append(
                    dist.isend(
                        torch.tensor([BYE, self.clock, 0, 0], dtype=torch.int64),
                        dst=server,
                        group=self.requests[s][self.rank],
                    )
                )
        for w in self.sends:
            w.wait()
        for t in self.threads:
            t.join()
        if self.server is not None:
            with self.server.lock:
                self.server.finish_sends()
            self._check_server()
        # No barrier: every group's last message (a BYE, the last reply) has
        # been received on the other side, and the whole group may hold a
        # dropped worker.
        for table in self.requests + self.replies:
            for g in table.values():
                dist.destroy_process_group(g)
