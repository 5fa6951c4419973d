"""Which server holds each key, and a worker's copy of each shard
(pyscalecomm.ps): the parameters of a float32 shard are views of one flat
buffer, with a spare of its size that the next pull lands in; taking the
pull swaps the two, so no step copies the parameters."""

from __future__ import annotations

import torch


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


class Shards:
    """`params` (the keys) split over `servers` shards: per shard its keys
    (parameter indices, in shard order) and elements; per key its shard."""

    def __init__(self, params: list, servers: int):
        self.params = params
        sizes = [p.numel() for p in params]
        self.owner = assign_keys(sizes, servers)
        self.keys = [[i for i in range(len(sizes)) if self.owner[i] == s] for s in range(servers)]
        self.numel = [sum(sizes[i] for i in keys) for keys in self.keys]
        # Per shard: a flat float32 buffer its parameters are views of (None
        # where one is not float32), and a spare of its size that the next
        # pull lands in.
        self.flat = [self._flatten(s) for s in range(servers)]
        self.spare = [None if f is None else torch.empty_like(f) for f in self.flat]

    def __len__(self) -> int:
        return len(self.keys)

    def pack(self, s: int, grads: bool) -> torch.Tensor:
        """Shard s's parameters (or gradients, zero where a parameter has
        none) as one new float32 tensor."""
        parts = []
        for i in self.keys[s]:
            p = self.params[i]
            t = p.grad if grads else p.detach()
            if t is None:
                t = torch.zeros_like(p)
            parts.append(t.detach().reshape(-1).to(torch.float32))
        return torch.cat(parts) if parts else torch.zeros(0)

    def clear_grads(self, s: int) -> None:
        for i in self.keys[s]:
            self.params[i].grad = None

    def lend_spare(self, s: int) -> torch.Tensor | None:
        """The spare, for a pull to land in (None: none free)."""
        spare, self.spare[s] = self.spare[s], None
        return spare

    def take(self, s: int, payload: torch.Tensor, grads: bool, set_grads: bool) -> None:
        """Puts a pull's `payload` in shard s: parameters (the payload
        becomes their storage where the shard is flat, its old storage the
        spare), or with `grads` the mean gradient, put in each ``.grad``
        only with `set_grads`."""
        flat = self.flat[s]
        if flat is not None and not grads:
            self._place(s, payload)
            self.flat[s], self.spare[s] = payload, flat
            return
        if flat is not None:
            self.spare[s] = payload  # copied out below
        at = 0
        with torch.no_grad():
            for i in self.keys[s]:
                p = self.params[i]
                n = p.numel()
                chunk = payload[at : at + n].view_as(p).to(p.dtype)
                at += n
                if not grads:
                    p.copy_(chunk)
                elif set_grads:
                    p.grad = chunk.clone()

    def _flatten(self, s: int) -> torch.Tensor | None:
        if any(self.params[i].dtype != torch.float32 for i in self.keys[s]):
            return None
        flat = self.pack(s, grads=False)
        self._place(s, flat)
        return flat

    def _place(self, s: int, flat: torch.Tensor) -> None:
        """Makes shard s's parameters views of `flat` (its layout)."""
        at = 0
        for i in self.keys[s]:
            p = self.params[i]
            p.data = flat[at : at + p.numel()].view_as(p)
            at += p.numel()
