"""What a parameter server's messages travel on (pyscalecomm.ps): the
groups of each server and remote worker, and the codec of the pushes."""

from __future__ import annotations

import torch
import torch.distributed as dist

import pyscalecomm
from pyscalecomm import _C


class PairGroups:
    """Per server s and remote worker w: ``requests[s][w]`` (the worker
    sends, one thread of the server receives) and ``replies[s][w]`` (the
    server sends), groups of those two ranks. Each group has one sender and
    one receiver side per process, so a rank that serves and works never
    queues its worker's messages behind its server's wait, and a worker's
    death touches only its own pair of groups. Every rank creates every
    group, in the same order; a rank keeps those it belongs to."""

    def __init__(self, server_ranks: list[int], world: int, rank: int, backend: str):
        options = None
        if backend == "scalecomm":  # point-to-point only: fixed algorithms, so no cost-model probe
            options = pyscalecomm.Options(algorithm="allreduce:ring,broadcast:chain,reduce:chain")
        self.requests: list[dict] = [{} for _ in server_ranks]
        self.replies: list[dict] = [{} for _ in server_ranks]
        for s, server in enumerate(server_ranks):
            for w in range(world):
                if w == server:
                    continue
                for table in (self.requests, self.replies):
                    g = dist.new_group(ranks=[server, w], backend=backend, pg_options=options)
                    if rank in (server, w):
                        table[s][w] = g

    def destroy(self) -> None:
        for table in self.requests + self.replies:
            for g in table.values():
                dist.destroy_process_group(g)


class PushCodec:
    """The pushes' codec (``spec``: docs/compression.md; None: float32 as
    is) over shards of `numel` elements, with error feedback per shard:
    what the codec dropped from a shard is added to its next push. A push
    is encoded with the worker's clock as the codec's seed, which travels
    in its header, so the server decodes it alike."""

    def __init__(self, spec: str | None, numel: list[int], error_feedback: bool):
        self.spec = spec if spec not in (None, "", "none") else None
        self.numel = numel
        self.wire: list[tuple[torch.dtype, int]] = []  # per shard: the payload's dtype and bytes
        if self.spec:
            if self.spec.startswith("powersgd"):
                raise ValueError("ParameterServer: powersgd takes two rounds per push; choose another codec")
            for n in numel:
                _, payload, nbytes, _ = _C.codec_roundtrip(torch.zeros(max(n, 1)), self.spec)
                self.wire.append((payload.dtype, nbytes))
        self.residual = [torch.zeros(n) for n in numel] if self.spec and error_feedback else None

    def encode(self, s: int, grad: torch.Tensor, clock: int, rank: int):
        """(what the server will apply, the bytes to send or None: send `grad` itself)."""
        if not self.spec or grad.numel() == 0:
            return grad, None
        if self.residual is not None:
            grad = grad + self.residual[s]
        decoded, payload, _, _ = _C.codec_roundtrip(grad, self.spec, seed=clock, rank=rank)
        if self.residual is not None:
            self.residual[s] = grad - decoded
        return decoded, payload.reshape(-1).view(torch.uint8)

    def receive(self, s: int, out: torch.Tensor, worker: int, group, clock: int) -> torch.Tensor:
        """A push's gradient for shard s from `worker` on `group`, in `out`."""
        if not self.spec or self.numel[s] == 0:
            dist.recv(out, src=worker, group=group)
            return out
        dtype, nbytes = self.wire[s]
        payload = torch.empty(nbytes, dtype=torch.uint8)
        dist.recv(payload, src=worker, group=group)
        out.zero_()
        _C.codec_decode_add(out, payload.view(dtype), self.spec, seed=clock)
        return out
