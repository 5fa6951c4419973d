"""The parameter server (pyscalecomm.ps): sync equals DDP, the ssp bound
holds as a property, async records staleness, state survives a round trip."""

import os
import time

import pytest
import torch
import torch.distributed as dist
from dist_helpers import run_ranks
from torch import nn

from pyscalecomm import ps


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def _batch(rank, step):
    g = torch.Generator().manual_seed(100 * rank + step)
    x = torch.randn(8, 6, generator=g)
    return x, x[:, :3].sum(dim=1, keepdim=True).repeat(1, 3) + 0.1 * torch.randn(8, 3, generator=g)


def _sync_vs_ddp(rank, n, optimizer, servers):
    kwargs = {"lr": 0.05, "weight_decay": 1e-3}
    if optimizer == "sgd":
        kwargs.update(momentum=0.9, nesterov=True)
    ddp = nn.parallel.DistributedDataParallel(_net())
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(ddp.parameters(), **kwargs)
    model = ps.ParameterServer(_net(), servers=servers, mode="sync", optimizer=optimizer, **kwargs)
    for step in range(6):
        x, y = _batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        nn.functional.mse_loss(model(x), y).backward()
    model(torch.zeros(1, 6))  # waits for the last pull
    for a, b in zip(ddp.module.parameters(), model.module.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    start = _net().parameters()
    moved = any(not torch.equal(a, b) for a, b in zip(start, model.module.parameters(), strict=True))
    stats = model.stats()
    model.close()
    return moved, stats.get("staleness", [])


@pytest.mark.parametrize("n,optimizer,servers", [(2, "sgd", 1), (3, "sgd", 2), (3, "adam", 3)])
def test_sync_matches_ddp_on_the_same_data(n, optimizer, servers):
    out = run_ranks(n, _sync_vs_ddp, optimizer, servers, timeout_s=180)
    assert all(moved for moved, _ in out)
    assert all(s == 0 for _, st in out for s in st)


def _sum_mode(rank, n):
    ddp = nn.parallel.DistributedDataParallel(_net())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    # Ranks start from different values: the server's (rank 0's) win.
    model = ps.ParameterServer(_net(seed=rank), servers=1, mode="sync", optimizer="sum")
    mine = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        x, y = _batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        mine.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        model.sync_gradients()
        mine.step()
    for a, b in zip(ddp.module.parameters(), model.module.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    model.close()
    return True


def test_sum_mode_leaves_the_step_to_the_worker_and_matches_ddp():
    run_ranks(2, _sum_mode, timeout_s=120)


def _compressed(rank, n, codec):
    model = ps.ParameterServer(_net(), servers=2, mode="sync", optimizer="sgd", lr=0.05, compression=codec)
    plain = ps.ParameterServer(_net(), servers=2, mode="sync", optimizer="sgd", lr=0.05)
    x_eval, y_eval = _batch(99, 0)
    with torch.no_grad():
        before = nn.functional.mse_loss(model.module(x_eval), y_eval).item()
    for step in range(10):
        x, y = _batch(rank, step)
        nn.functional.mse_loss(model(x), y).backward()
        nn.functional.mse_loss(plain(x), y).backward()
    model.close()
    plain.close()
    with torch.no_grad():
        after = nn.functional.mse_loss(model.module(x_eval), y_eval).item()
    gap = max((a - b).abs().max().item() for a, b in zip(model.parameters(), plain.parameters(), strict=True))
    return before, after, gap, model.stats()["pushed_bytes"], plain.stats()["pushed_bytes"]


@pytest.mark.parametrize("codec", ["fp16", "topk:0.25"])
def test_compressed_pushes_train_and_send_fewer_bytes(codec):
    for before, after, gap, sent, plain in run_ranks(2, _compressed, codec, timeout_s=120):
        assert after < before
        assert sent < 0.6 * plain  # fp16: half; top-k 25%: an index and a value per kept element
        if codec == "fp16":
            assert gap < 1e-2  # fp16 rounding with error feedback stays close to the exact run
        else:
            assert gap > 0  # top-k changes the trajectory


def _straggler_run(rank, n, mode, steps, slow_rank, delay_s):
    model = ps.ParameterServer(_net(), servers=1, mode=mode, optimizer="sgd", lr=0.05)
    x_eval, y_eval = _batch(99, 0)

    def held_out():
        with torch.no_grad():
            return nn.functional.mse_loss(model.module(x_eval), y_eval).item()

    before = held_out()
    for step in range(steps):
        x, y = _batch(rank, step)
        nn.functional.mse_loss(model(x), y).backward()
        if rank == slow_rank:
            time.sleep(delay_s)
    model.close()  # then every pull has been answered
    return model.stats(), (before, held_out())


@pytest.mark.parametrize("k", [0, 2])
def test_ssp_never_lets_a_worker_lead_the_slowest_by_more_than_k(k):
    steps = 12
    out = run_ranks(3, _straggler_run, f"ssp:{k}", steps, 2, 0.03, timeout_s=180)
    stats = out[0][0]
    assert len(stats["leads"]) == 3 * steps
    assert max(stats["leads"]) <= k, stats["leads"]
    assert max(stats["leads"]) == k  # the bound was reached: the fast workers were held at it
    assert stats["pushes"] == [steps] * 3


def test_async_lets_fast_workers_run_ahead_and_records_staleness():
    steps = 12
    out = run_ranks(3, _straggler_run, "async", steps, 2, 0.03, timeout_s=180)
    stats = out[0][0]
    assert max(stats["leads"]) > 2  # not held: the same run under ssp:2 stays at 2
    assert max(stats["staleness"]) > 0
    assert stats["version"] == 3 * steps  # every gradient applied on arrival
    for _, (before, after) in out:
        assert after < before


def _storages(rank, n, dtype):
    """The storages the module's parameters live in at each of 6 steps, and
    the parameters at the end (the server's, pulled)."""
    model = ps.ParameterServer(_net().to(dtype), servers=1, mode="sync", optimizer="sgd", lr=0.05)
    seen = []
    for step in range(6):
        x, y = _batch(rank, step)
        out = model(x.to(dtype))
        seen.append({p.untyped_storage().data_ptr() for p in model.module.parameters()})
        nn.functional.mse_loss(out, y.to(dtype)).backward()
    model.close()
    return seen, [p.detach().tolist() for p in model.module.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_pull_lands_in_a_spare_buffer_that_becomes_the_parameters(dtype):
    # float32: the shard's parameters are views of one buffer, and each pull
    # swaps it with a spare, so no step copies or allocates the parameters;
    # float64 (exchanged as float32) takes the copying path. Either way every
    # rank ends with the server's parameters.
    out = run_ranks(2, _storages, dtype, timeout_s=120)
    for seen, _ in out:
        if dtype == torch.float32:
            assert all(len(step) == 1 for step in seen), seen  # one buffer per shard (one server)
            assert len(set().union(*seen)) == 2, seen  # and its spare
        else:
            assert all(step == seen[0] for step in seen), seen  # copied into, in place
    assert out[0][1] == out[1][1]


def _round_trip(rank, n):
    model = ps.ParameterServer(_net(), servers=2, mode="sync", optimizer="adam", lr=0.01)

    def train(steps):
        for step in steps:
            x, y = _batch(rank, step)
            nn.functional.mse_loss(model(x), y).backward()
        model(torch.zeros(1, 6))
        return [p.detach().clone() for p in model.module.parameters()]

    train(range(3))
    saved = model.state_dict()
    after = train(range(3, 5))
    model.load_state_dict(saved)
    again = train(range(3, 5))
    for a, b in zip(after, again, strict=True):
        assert torch.equal(a, b)
    stats = model.stats()
    model.close()
    return stats.get("version")


def test_state_dict_round_trip_restores_shards_versions_and_optimizer_state():
    versions = run_ranks(2, _round_trip, timeout_s=120)
    assert versions == [5, 5]  # 5 steps; then back to the saved version 3 and 2 steps again


def _worker_dies(rank, n):
    model = ps.ParameterServer(_net(), servers=1, mode="sync")
    for step in range(6):
        x, y = _batch(rank, step)
        out = model(x)  # every worker's step-2 push has arrived
        if rank == 2 and step == 3:
            os._exit(3)  # dies without a word
        if rank == 0 and step == 3:
            time.sleep(1)  # its server sees the death before its worker pushes again
        nn.functional.mse_loss(out, y).backward()
    model(torch.zeros(1, 6))
    model.close()
    return "finished"


def test_a_dead_worker_ends_the_others_with_errors_that_name_it_not_a_hang():
    started = time.monotonic()
    out = run_ranks(
        3, _worker_dies, expect_errors=True, allow_missing=(2,), timeout_s=120, group_timeout_s=300
    )
    assert time.monotonic() - started < 60  # the links' closing, not the group's 300 s timeout
    assert "this rank's server failed" in out[0].text and "rank 2" in out[0].text, out[0].text
    assert "server rank 0 did not answer" in out[1].text, out[1].text


def _worker_dies_under(rank, n, mode):
    # Ranks 0 and 1 serve; rank 2 only works, and dies after step 3's pulls.
    model = ps.ParameterServer(_net(), servers=2, mode=mode, lr=0.02)
    for step in range(8):
        x, y = _batch(rank, step)
        out = model(x)
        if rank == 2 and step == 3:
            os._exit(3)
        nn.functional.mse_loss(out, y).backward()
    model(torch.zeros(1, 6))
    model.close()  # after every live worker's last push
    return model.stats()


@pytest.mark.parametrize("mode", ["async", "ssp:1"])
def test_a_dead_worker_is_dropped_and_training_goes_on_without_it(mode):
    # Under ssp:1 the survivors would be held forever by the dead worker's clock.
    out = run_ranks(3, _worker_dies_under, mode, allow_missing=(2,), timeout_s=120, group_timeout_s=300)
    for stats in out[:2]:
        assert stats["steps"] == 8
        assert list(stats["dropped"]) == [2], stats
        assert "died" in stats["dropped"][2], stats
        assert stats["pushes"][:2] == [8, 8] and stats["pushes"][2] <= 4, stats


def test_arguments_are_checked():
    assert ps.parse_mode("ssp:4") == ("ssp", 4)
    with pytest.raises(ValueError, match="sync, async, ssp:K"):
        ps.parse_mode("ssp")
    assert ps.assign_keys([10, 1, 7, 3], 2) == [0, 0, 1, 1]  # loads 10+1 and 7+3


def _bad_servers(rank, n):
    try:
        ps.ParameterServer(_net(), servers=[0, 5])
    except ValueError as e:
        return str(e)
    return "no error"


def test_servers_outside_the_group_are_refused():
    out = run_ranks(2, _bad_servers, timeout_s=60)
    assert all("servers=[0, 5] on a group of 2 ranks" in e for e in out)


def _on_gloo(rank, n):
    model = ps.ParameterServer(_net(), servers=2, mode="ssp:1", backend="gloo", lr=0.02)
    for step in range(4):
        x, y = _batch(rank, step)
        nn.functional.mse_loss(model(x), y).backward()
    model.close()
    return dist.get_backend()


def test_runs_over_the_stock_backend_too():
    assert run_ranks(2, _on_gloo, timeout_s=60) == ["scalecomm", "scalecomm"]
