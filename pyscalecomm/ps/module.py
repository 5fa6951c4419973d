"""The ParameterServer module: a worker's side of the protocol, wrapped
around a model as DDP is (pyscalecomm.ps)."""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist
from torch import nn

from pyscalecomm.ps.server import BYE, PULL, PUSH, Reply, Server, optimizer_factory, parse_mode
from pyscalecomm.ps.shards import Shards
from pyscalecomm.ps.wire import PairGroups, PushCodec


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
        self.server_ranks = self._check_roles(group, servers)
        self.params = [p for p in module.parameters() if p.requires_grad]
        if any(p.device.type != "cpu" for p in self.params):
            raise ValueError("ParameterServer: CPU parameters only (move the module to the CPU)")
        self.sum_mode = optimizer == "sum"
        make = optimizer_factory(optimizer, lr, momentum, weight_decay, nesterov, betas)
        self.shards = Shards(self.params, len(self.server_ranks))
        self.codec = PushCodec(compression, self.shards.numel, error_feedback)
        self.pushed_bytes = 0  # this worker's, as sent (encoded where compressed)
        self.groups = PairGroups(self.server_ranks, self.world, self.rank, backend or dist.get_backend(group))
        self.server: Server | None = None
        self.threads: list[threading.Thread] = []
        if self.rank in self.server_ranks:
            self._start_server(self.server_ranks.index(self.rank), make)
        n = len(self.server_ranks)
        self.clock = 0
        self.read_version = [0] * n
        self.pending: list[Reply | None] = [None] * n
        self.pushed = [False] * n
        self.ready_count = [0] * n
        self.sends: list = []
        self.closed = False
        self.hooks = [
            p.register_post_accumulate_grad_hook(self._grad_ready(i)) for i, p in enumerate(self.params)
        ]
        self.end_queued = False
        for s in range(n):
            self._request(s, PULL, None)
        self._wait_pulls(sum_mode_grads=False)

    def _check_roles(self, group, servers) -> list[int]:
        if dist.get_process_group_ranks(group) != list(range(self.world)):
            raise ValueError("ParameterServer: the group must be ranks 0..world-1 of the default group")
        ranks = list(range(servers)) if isinstance(servers, int) else sorted(set(servers))
        if not ranks or any(s < 0 or s >= self.world for s in ranks):
            raise ValueError(
                f"ParameterServer: servers={servers!r} on a group of {self.world} ranks: give "
                f"1..{self.world} or a list of ranks in 0..{self.world - 1}"
            )
        return ranks

    def _start_server(self, s: int, make_optimizer) -> None:
        """This rank serves shard s: its server, and a thread per remote worker."""
        flat = self.shards.pack(s, grads=False)
        keys, replies = self.shards.keys[s], self.groups.replies[s]
        self.server = Server(flat, keys, self.mode, self.k, self.world, make_optimizer, replies, self.rank)
        for w, group in self.groups.requests[s].items():
            buf = torch.empty(self.shards.numel[s])  # a push's gradient, consumed under the lock

            def receive(clock, s=s, w=w, group=group, buf=buf):
                return self.codec.receive(s, buf, w, group, clock)

            t = threading.Thread(
                target=self.server.serve, args=(w, group, receive), daemon=True, name=f"scalecomm-ps-{w}"
            )
            t.start()
            self.threads.append(t)

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
            s = self.shards.owner[i]
            self.ready_count[s] += 1
            if self.ready_count[s] == len(self.shards.keys[s]):
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

    def _push(self, s: int) -> None:
        if self.pending[s] is not None:  # the last pull: two backwards without a forward between
            self._await(s, self.pending[s])
            self._take(s, self.pending[s], sum_mode_grads=False)
        grad = self.shards.pack(s, grads=True)
        self.shards.clear_grads(s)
        self.pushed[s] = True
        # The server decodes with the header's clock; it applies `grad`.
        grad, payload = self.codec.encode(s, grad, self.clock, self.rank)
        self.pushed_bytes += payload.numel() if payload is not None else 4 * grad.numel()
        self._request(s, PUSH, grad, payload)

    def _request(self, s: int, op: int, grad: torch.Tensor | None, payload: torch.Tensor | None = None):
        server = self.server_ranks[s]
        reply = Reply(grads=self.sum_mode and op == PUSH)
        reply.payload = self.shards.lend_spare(s)
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
        requests, replies = self.groups.requests[s][self.rank], self.groups.replies[s][self.rank]
        self.sends.append(dist.isend(header, dst=server, group=requests))
        if grad is not None:
            wire = payload if payload is not None else grad
            self.sends.append(dist.isend(wire, dst=server, group=requests))
        if reply.payload is None:
            reply.payload = torch.empty(self.shards.numel[s])
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

    def _await(self, s: int, reply: Reply) -> None:
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

    def _take(self, s: int, reply: Reply, sum_mode_grads: bool) -> None:
        self.pending[s] = None
        self.read_version[s] = int(reply.header[0])
        self.shards.take(s, reply.payload, reply.grads, sum_mode_grads)

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
                bye = torch.tensor([BYE, self.clock, 0, 0], dtype=torch.int64)
                self.sends.append(dist.isend(bye, dst=server, group=self.groups.requests[s][self.rank]))
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
        self.groups.destroy()
