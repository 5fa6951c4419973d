"""DDP over scalecomm trains to the same weights as DDP over gloo."""

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from dist_helpers import run_ranks
from torch.nn.parallel import DistributedDataParallel as DDP


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))


def _train(rank, n, steps, bucket_cap_mb):
    gloo = dist.new_group(backend="gloo")
    results = {}
    for name, group in [("scalecomm", None), ("gloo", gloo)]:
        model = DDP(_model(), process_group=group, bucket_cap_mb=bucket_cap_mb)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(100 + rank)
        for _ in range(steps):
            x = torch.randn(32, 64, generator=g)
            y = torch.randint(0, 10, (32,), generator=g)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        results[name] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    mine = results["scalecomm"]
    # identical on every rank: gather everyone's weights through gloo
    everyone = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(everyone, mine, group=gloo)
    same_on_all = all(torch.equal(everyone[0], w) for w in everyone)
    max_diff = (mine - results["gloo"]).abs().max().item()
    return same_on_all, torch.equal(mine, results["gloo"]), max_diff


@pytest.mark.parametrize("bucket_cap_mb", [25, 0.01])
def test_ddp_two_ranks_equals_gloo_bitwise(bucket_cap_mb):
    # With two ranks a+b == b+a, so the weights must be bit-identical to gloo's.
    for same_on_all, equal, diff in run_ranks(2, _train, 20, bucket_cap_mb):
        assert same_on_all
        assert equal, f"max |scalecomm - gloo| = {diff}"


def test_ddp_three_ranks_matches_gloo():
    # With three ranks the summation order differs from gloo's: equal to rounding.
    for same_on_all, _, diff in run_ranks(3, _train, 20, 25):
        assert same_on_all
        assert diff < 1e-5
