"""reduce, reduce_scatter (list and tensor), gather, scatter and all_to_all
(even and uneven splits) against closed forms and gloo, world sizes 1-4."""

import time

import pytest
import torch
import torch.distributed as dist
from dist_helpers import group_error, run_ranks

R = dist.ReduceOp


def _x(rank, count, dtype=torch.float32, salt=0):
    return ((torch.arange(count) * 7 + 13 * rank + salt) % 23).to(dtype)


def _gloo_too(collective, *args, **kwargs):
    """The collective on the gloo group; False where gloo lacks it or the
    dtype (every rank alike: gloo refuses before communicating)."""
    try:
        collective(*args, **kwargs)
        return True
    except (RuntimeError, ValueError):
        return False


def _rooted_and_exchanges(rank, n):
    gloo = dist.new_group(backend="gloo")
    gloo_checked = set()
    for dtype in [torch.float32, torch.int64, torch.bfloat16]:
        for count in [0, 1, n + 1, 5003]:
            total = sum(_x(r, count, torch.float64) for r in range(n))
            for root in range(n):
                # reduce: the root gets the sum; other ranks' inputs stay as they were
                t = _x(rank, count, dtype)
                dist.reduce(t, dst=root)
                want = total.to(dtype) if rank == root else _x(rank, count, dtype)
                assert torch.equal(t, want), f"reduce {dtype} {count} root {root}"
                g = _x(rank, count, dtype)
                if _gloo_too(dist.reduce, g, dst=root, group=gloo):
                    assert rank != root or torch.equal(t, g), f"reduce vs gloo {dtype} {count} root {root}"
                    gloo_checked.add("reduce")
                # gather / scatter
                outs = [torch.empty(count, dtype=dtype) for _ in range(n)] if rank == root else None
                dist.gather(_x(rank, count, dtype), outs, dst=root)
                if rank == root:
                    assert all(torch.equal(outs[q], _x(q, count, dtype)) for q in range(n)), "gather"
                gouts = [torch.empty(count, dtype=dtype) for _ in range(n)] if rank == root else None
                if _gloo_too(dist.gather, _x(rank, count, dtype), gouts, dst=root, group=gloo):
                    assert rank != root or list(map(torch.equal, outs, gouts)) == [True] * n, "gather vs gloo"
                    gloo_checked.add("gather")
                got = torch.empty(count, dtype=dtype)
                ins = [_x(root, count, dtype, salt=q) for q in range(n)] if rank == root else None
                dist.scatter(got, ins, src=root)
                assert torch.equal(got, _x(root, count, dtype, salt=rank)), "scatter"
                ggot = torch.empty(count, dtype=dtype)
                if _gloo_too(dist.scatter, ggot, ins, src=root, group=gloo):
                    assert torch.equal(got, ggot), "scatter vs gloo"
                    gloo_checked.add("scatter")
            # reduce_scatter_tensor and the list form
            full = _x(rank, count * n, dtype)
            out = torch.empty(count, dtype=dtype)
            dist.reduce_scatter_tensor(out, full)
            whole = sum(_x(r, count * n, torch.float64) for r in range(n)).to(dtype)
            assert torch.equal(out, whole[rank * count : (rank + 1) * count]), "reduce_scatter_tensor"
            assert torch.equal(full, _x(rank, count * n, dtype)), "reduce_scatter_tensor changed its input"
            gout = torch.empty(count, dtype=dtype)
            if _gloo_too(dist.reduce_scatter_tensor, gout, _x(rank, count * n, dtype), group=gloo):
                assert torch.equal(out, gout), "reduce_scatter_tensor vs gloo"
                gloo_checked.add("reduce_scatter_tensor")
            out2 = torch.empty(count, dtype=dtype)
            dist.reduce_scatter(out2, list(full.chunk(n)) if count else [torch.empty(0, dtype=dtype)] * n)
            assert torch.equal(out2, out), "reduce_scatter"
            # all_to_all_single, even splits, compared with gloo
            a = _x(rank, count * n, dtype).reshape(n, count) if count else torch.empty(n, 0, dtype=dtype)
            mine, theirs = torch.empty_like(a), torch.empty_like(a)
            dist.all_to_all_single(mine, a)
            dist.all_to_all_single(theirs, a, group=gloo)
            assert torch.equal(mine, theirs), "all_to_all_single"
    # uneven splits: rank s sends s + q + 1 rows of width 3 to rank q
    in_splits = [rank + q + 1 for q in range(n)]
    out_splits = [q + rank + 1 for q in range(n)]
    inp = torch.cat([torch.full((rank + q + 1, 3), float(100 * rank + q)) for q in range(n)])
    out = torch.empty(sum(out_splits), 3)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((q + rank + 1, 3), float(100 * q + rank)) for q in range(n)])
    assert torch.equal(out, want), "all_to_all_single uneven"
    gout = torch.empty_like(out)
    if _gloo_too(dist.all_to_all_single, gout, inp, out_splits, in_splits, group=gloo):
        assert torch.equal(out, gout), "all_to_all_single uneven vs gloo"
        gloo_checked.add("all_to_all_single")
    # splits with zeros: rank s sends (s + 2q) % 3 rows to rank q (empty blocks still travel as headers)
    in_splits = [(rank + 2 * q) % 3 for q in range(n)]
    out_splits = [(q + 2 * rank) % 3 for q in range(n)]
    inp = torch.cat([torch.full((in_splits[q], 2), float(100 * rank + q)) for q in range(n)])
    out = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((out_splits[q], 2), float(100 * q + rank)) for q in range(n)])
    assert torch.equal(out, want), "all_to_all_single with empty splits"
    # all_to_all list form with different sizes per pair, and a dtype that only moves (bool)
    ins = [torch.full((rank + q + 2,), (rank + q) % 2 == 0) for q in range(n)]
    outs = [torch.empty(q + rank + 2, dtype=torch.bool) for q in range(n)]
    dist.all_to_all(outs, ins)
    assert all(torch.equal(outs[q], torch.full((q + rank + 2,), (q + rank) % 2 == 0)) for q in range(n))
    return sorted(gloo_checked)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_reduce_gather_scatter_reduce_scatter_all_to_all(n):
    for checked in run_ranks(n, _rooted_and_exchanges, timeout_s=300):
        # every collective compared with gloo wherever gloo takes it (float32 at least)
        want = ["all_to_all_single", "gather", "reduce", "reduce_scatter_tensor", "scatter"]
        assert checked == want, checked


def _avg_and_premul(rank, n):
    t = torch.full((10,), float(rank + 1))
    dist.reduce(t, dst=0, op=R.AVG)
    if rank == 0:
        assert torch.allclose(t, torch.full((10,), (n + 1) / 2))
    out = torch.empty(4)
    dist.reduce_scatter_tensor(out, torch.full((4 * n,), float(rank + 1)), op=dist._make_nccl_premul_sum(3.0))
    assert torch.equal(out, torch.full((4,), 3.0 * n * (n + 1) / 2))
    return True


def test_reduce_avg_and_reduce_scatter_premul_sum():
    run_ranks(3, _avg_and_premul)


def _mismatched_splits(rank, n):
    inp = torch.ones(4 if rank == 0 else 2)
    out = torch.empty(2 if rank == 0 else 4)
    in_splits = [2, 2] if rank == 0 else [1, 1]
    out_splits = [2, 0] if rank == 0 else [3, 1]  # rank 1 expects 3 rows from rank 0, which sends 2
    try:
        dist.all_to_all_single(out, inp, out_splits, in_splits)
    except dist.DistBackendError as e:
        return str(e)
    return "no error"


def test_all_to_all_split_mismatch_is_named():
    # Rank 0 expects nothing from rank 1, which sends a row: rank 0 must fail too (not return
    # and leave rank 1 to report a closed link), and at least one rank names the cause.
    msgs = run_ranks(2, _mismatched_splits)
    assert "no error" not in msgs, msgs
    assert any("input_split_sizes" in m for m in msgs), msgs


def _profiled(rank, n):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        dist.all_reduce(torch.ones(100))
        dist.broadcast(torch.ones(10), src=0)
    return sorted({e.name for e in prof.events() if e.name.startswith("scalecomm")})


def test_profiler_names_collective_and_algorithm():
    for names in run_ranks(2, _profiled, env={"SCALECOMM_ALGO": "rhd"}):
        assert "scalecomm:allreduce:rhd" in names, names
        assert "scalecomm:broadcast:chain" in names, names  # auto: the chain wins for 40 bytes at n=2


def _point_to_point(rank, n):
    right, left = (rank + 1) % n, (rank - 1) % n
    for dtype in [torch.float32, torch.int64, torch.bool, torch.complex64]:
        for count in [0, 1, 1000, 300001]:
            out = (torch.arange(count) + 10 * rank).to(dtype)
            got = torch.empty(count, dtype=dtype)
            # even ranks send first, odd ranks receive first: no cycle of blocked sends
            if rank % 2 == 0:
                dist.send(out, dst=right, tag=count)
                dist.recv(got, src=left, tag=count)
            else:
                dist.recv(got, src=left, tag=count)
                dist.send(out, dst=right, tag=count)
            assert torch.equal(got, (torch.arange(count) + 10 * left).to(dtype)), f"{dtype} {count}"
    # isend/irecv in both directions at once (small messages fit the transport's buffers)
    got = torch.empty(8)
    ops = [dist.P2POp(dist.isend, torch.full((8,), float(rank)), right), dist.P2POp(dist.irecv, got, left)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    assert torch.equal(got, torch.full((8,), float(left)))
    t = torch.ones(4)
    dist.all_reduce(t)  # p2p did not disturb the group's collective sequence
    assert torch.equal(t, torch.full((4,), float(n)))
    return True


@pytest.mark.parametrize("n", [2, 3])
def test_send_recv_isend_irecv_and_batch(n):
    run_ranks(n, _point_to_point, timeout_s=300)


def _batch_receives_first(rank, n):
    # Everyone posts its receives before its sends, with messages far larger than
    # the transport's buffers: a batch progresses all of them together.
    count = 3 << 20  # 12 MiB of float32 per message, 3x the shm ring
    ops, gots = [], {}
    for peer in range(n):
        if peer != rank:
            gots[peer] = torch.empty(count)
            ops.append(dist.P2POp(dist.irecv, gots[peer], peer, tag=peer))
    for peer in range(n):
        if peer != rank:
            ops.append(dist.P2POp(dist.isend, torch.full((count,), float(rank)), peer, tag=rank))
    works = dist.batch_isend_irecv(ops)
    for w in works:
        w.wait()
    ok = all(torch.equal(g, torch.full((count,), float(p))) for p, g in gots.items())
    # a batch between two ranks only leaves the group's collective numbering intact
    if rank < 2:
        x = torch.full((5,), float(rank))
        peer = 1 - rank
        y = torch.empty(5)
        for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, y, peer), dist.P2POp(dist.isend, x, peer)]):
            w.wait()
        ok = ok and torch.equal(y, torch.full((5,), float(peer)))
    t = torch.ones(3)
    dist.all_reduce(t)
    return ok and torch.equal(t, torch.full((3,), float(n))), len(works)


def test_batch_isend_irecv_receives_first_with_large_messages():
    assert run_ranks(3, _batch_receives_first, timeout_s=120) == [(True, 1)] * 3


def _isend_irecv_ring(rank, n, count):
    """Plain isend/irecv (no batch) around a ring with messages far larger
    than a link buffers (ring attention, hand-written pipelines): each rank's
    posted send and receive progress together, as on gloo."""
    gloo = dist.new_group(backend="gloo")
    right, left = (rank + 1) % n, (rank - 1) % n
    mine = torch.arange(count, dtype=torch.float32) + 1000 * rank
    results = []
    for group in (None, gloo):
        got = torch.empty(count)
        send = dist.isend(mine, right, group=group)
        recv = dist.irecv(got, left, group=group)
        recv.wait()
        send.wait()
        results.append(got)
    # sends posted before receives, to several peers, with tags, then a collective
    gots = {p: torch.empty(count // 4) for p in range(n) if p != rank}
    works = [dist.isend(mine[: count // 4] + p, p, tag=7) for p in gots]
    works += [dist.irecv(g, p, tag=7) for p, g in gots.items()]
    for w in works:
        w.wait()
    fanned = all(
        torch.equal(g, torch.arange(count // 4, dtype=torch.float32) + 1000 * p + rank)
        for p, g in gots.items()
    )
    t = torch.ones(3)
    dist.all_reduce(t)
    return torch.equal(results[0], results[1]), fanned, t.tolist()


@pytest.mark.parametrize("n", [2, 3])
def test_plain_isend_irecv_rings_larger_than_the_links_buffers_complete_like_gloo(n):
    count = 2 << 20  # 8 MiB of float32 per message: 8x the shm ring
    out = run_ranks(n, _isend_irecv_ring, count, group_timeout_s=20, timeout_s=120)
    assert out == [(True, True, [float(n)] * 3)] * n, out


def _any_source(rank, n):
    if rank == 0:
        got, sources = [], []
        for _ in range(2 * (n - 1)):
            t = torch.empty(4)
            sources.append(dist.recv(t, tag=7))  # src=None: any source
            got.append((sources[-1], t[0].item()))
        # a specific receive after the any-source ones keeps the pair numbering
        t = torch.empty(2)
        dist.recv(t, src=1, tag=9)
        return sorted(got), t.tolist()
    for k in range(2):
        dist.send(torch.full((4,), float(10 * rank + k)), dst=0, tag=7)
    if rank == 1:
        dist.send(torch.tensor([5.0, 6.0]), dst=0, tag=9)
    return None


def test_recv_from_any_source_returns_each_sender_in_order():
    got, last = run_ranks(3, _any_source)[0]
    # per sender, its messages arrive in the order it sent them
    assert got == [(1, 10.0), (1, 11.0), (2, 20.0), (2, 21.0)], got
    assert last == [5.0, 6.0]


def _any_source_after_a_peer_left(rank, n, expect_more):
    # Rank 2 sends and leaves the group at once; rank 1 sends later. Rank 0's
    # receive from any source waits for rank 1 while rank 2's link is closed.
    import time

    if rank == 0:
        got = []
        for _ in range(2):
            t = torch.empty(4)
            got.append((dist.recv(t, tag=7), t[0].item()))
        try:
            for _ in range(2 if expect_more else 1):
                t = torch.empty(4)
                got.append((dist.recv(t, tag=7), t[0].item()))
        except dist.DistBackendError as e:
            return got, str(e)
        return got, None
    if rank == 1:
        time.sleep(0.5)  # after rank 2 has left
    dist.send(torch.full((4,), float(10 * rank)), dst=0, tag=7)
    if rank == 2:
        dist.send(torch.full((4,), float(10 * rank + 1)), dst=0, tag=7)
        dist.destroy_process_group()
    return None


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_recv_from_any_source_waits_for_the_others_when_a_peer_left(transport):
    env = {"SCALECOMM_TRANSPORT": transport}
    got, err = run_ranks(3, _any_source_after_a_peer_left, False, env=env)[0]
    assert err is None, err
    assert sorted(got) == [(1, 10.0), (2, 20.0), (2, 21.0)], got


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_recv_from_any_source_fails_once_every_peer_left(transport):
    env = {"SCALECOMM_TRANSPORT": transport}
    # group timeout 60 s: the error must come from the closed links, not the deadline
    start = time.monotonic()
    got, err = run_ranks(3, _any_source_after_a_peer_left, True, env=env)[0]
    assert sorted(got) == [(1, 10.0), (2, 20.0), (2, 21.0)], got
    assert err is not None and "recv from any source (rank 0)" in err, err
    assert "every peer left" in err and "tag 7" in err, err
    assert time.monotonic() - start < 40


def _any_source_past_a_departed_peers_other_message(rank, n):
    # Rank 2 sends a message with another tag and leaves; rank 0's receive
    # from any source for tag 7 waits for rank 1, and a later receive from
    # rank 2 still gets rank 2's message.
    import time

    if rank == 0:
        t = torch.empty(4)
        src = dist.recv(t, tag=7)
        u = torch.empty(3)
        dist.recv(u, src=2, tag=8)
        return src, t[0].item(), u.tolist()
    if rank == 1:
        time.sleep(1.0)  # after rank 2 has left
        dist.send(torch.full((4,), 10.0), dst=0, tag=7)
    else:
        dist.send(torch.tensor([1.0, 2.0, 3.0]), dst=0, tag=8)
        dist.destroy_process_group()
    return None


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_recv_from_any_source_passes_a_departed_peers_message_of_another_tag(transport):
    env = {"SCALECOMM_TRANSPORT": transport}
    src, first, later = run_ranks(3, _any_source_past_a_departed_peers_other_message, env=env)[0]
    assert (src, first) == (1, 10.0)
    assert later == [1.0, 2.0, 3.0]


def _tag_mismatch(rank, n):
    try:
        if rank == 0:
            dist.send(torch.ones(4), dst=1, tag=5)
            dist.barrier()
        else:
            dist.recv(torch.ones(4), src=0, tag=7)
        return "no error"
    except dist.DistBackendError as e:
        return str(e)


def test_send_recv_tag_mismatch_is_named():
    msgs = run_ranks(2, _tag_mismatch)
    assert "tag 5" in msgs[1] and "tag 7" in msgs[1], msgs


def _auto(rank, n):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for count in [2, 100003]:
            t = torch.full((count,), float(rank + 1))
            dist.all_reduce(t)
            assert torch.equal(t, torch.full((count,), n * (n + 1) / 2))
        ts = [torch.ones(5), torch.ones(7)]
        dist.all_reduce_coalesced(ts)
        assert all(torch.equal(x, torch.full_like(x, float(n))) for x in ts)
    return sorted({e.name for e in prof.events() if e.name.startswith("scalecomm:allreduce:")})


def test_auto_picks_a_real_algorithm_per_call_and_names_it():
    real = ("ring", "rhd", "tree", "dbtree", "direct", "shared")
    # The model picks at submit: the profiler's range names the algorithm.
    for names in run_ranks(3, _auto, env={"SCALECOMM_ALGO": "auto", "SCALECOMM_AUTOTUNE": "model"}):
        assert names and all(x.split(":")[-1] in real for x in names), names
    # Online, the algorithm is picked when the call runs: the range says allreduce,
    # stats and the timeline name the algorithm (tests/test_autotune.py).
    for names in run_ranks(3, _auto, env={"SCALECOMM_ALGO": "auto", "SCALECOMM_AUTOTUNE": "online"}):
        assert names == [], names


def _stats(rank, n):
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    for _ in range(3):
        dist.all_reduce(torch.ones(256))
    dist.broadcast(torch.ones(10), src=0)
    return be.stats()


def test_stats_count_operations_by_collective_and_algorithm():
    for stats in run_ranks(2, _stats, env={"SCALECOMM_ALGO": "allreduce:direct, broadcast:tree"}):
        assert stats["allreduce:direct"]["calls"] == 3, stats
        assert stats["allreduce:direct"]["bytes"] == 3 * 256 * 4, stats
        assert stats["broadcast:tree"]["calls"] == 1 and stats["allreduce:direct"]["seconds"] > 0, stats


def _tuned(rank, n, path):
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    dist.all_reduce(torch.ones(2))  # 8 bytes
    dist.all_reduce(torch.ones(1024))  # 4 KiB
    dist.all_reduce(torch.ones(1 << 20))  # 4 MiB: nearest measured size is 64 KiB
    return sorted(k for k in be.stats() if k.startswith("allreduce:")), be.cost_params


def test_tuning_file_decides_auto_and_skips_the_probe(tmp_path):
    path = tmp_path / "tuning.txt"
    text = (
        "# written by hand for the test\nworld 2\nalpha 3e-06\nbeta 2e-10\n"
        "allreduce 8 tree\nallreduce 4096 direct\nallreduce 65536 rhd\n"
    )
    path.write_text(text)
    # The model: the winner of the nearest measured size (4 MiB: 64 KiB's).
    env = {"SCALECOMM_TUNING_FILE": str(path), "SCALECOMM_AUTOTUNE": "model"}
    for names, costs in run_ranks(2, _tuned, str(path), env=env):
        assert names == ["allreduce:direct", "allreduce:rhd", "allreduce:tree"], names
        assert costs["alpha"] == 3e-06 and costs["beta"] == 2e-10, costs
    # Online: the sizes it has are decided; the 4 MiB bucket is measured.
    path.write_text(text)
    online = {
        "SCALECOMM_TUNING_FILE": str(path),
        "SCALECOMM_AUTOTUNE": "online",
        "SCALECOMM_AUTO_EXPLORE_PERCENT": "100",
    }
    for names, costs in run_ranks(2, _tuned, str(path), env=online):
        trials = [x for x in names if x.endswith(" (trial)")]
        assert sorted(set(names) - set(trials)) == ["allreduce:direct", "allreduce:tree"], names
        assert len(trials) == 1, names
        assert costs["alpha"] == 3e-06 and costs["beta"] == 2e-10, costs


def _tuned_pairwise(rank, n, path):
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    t = torch.ones(1 << 14)  # 64 KiB: the nearest measured size says pairwise, which cannot take it
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1 << 14,), 2.0))
    small = torch.ones(8)
    dist.all_reduce(small)
    return sorted(k for k in be.stats() if k.startswith("allreduce:"))


def test_a_tuned_winner_that_cannot_take_a_message_is_not_used_for_it(tmp_path):
    path = tmp_path / "tuning.txt"
    path.write_text("world 2\nalpha 3e-06\nbeta 2e-10\nallreduce 4096 pairwise\n")
    env = {"SCALECOMM_TUNING_FILE": str(path), "SCALECOMM_AUTOTUNE": "model"}
    for names in run_ranks(2, _tuned_pairwise, str(path), env=env):
        assert "allreduce:pairwise" in names and len(names) == 2, names


def test_bad_tuning_file_is_a_value_error_with_the_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("world 2\nallreduce 8 warp-drive\n")
    for msg in run_ranks(2, group_error, {"tuning_file": str(path)}):
        assert "line 2" in msg and "pyscalecomm.tune" in msg, msg


def test_tune_command_writes_a_file_that_auto_accepts(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "t.txt"
    cmd = [sys.executable, "-m", "pyscalecomm.tune", "--nproc", "2", "-b", "8", "-e", "4K", "-f", "64"]
    cmd += ["-n", "2", "-w", "1", "--rounds", "1", "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    # It measures what auto weighs here: on one host, the shared windows and
    # dbtree among them, never hier.
    head = next(ln for ln in res.stdout.splitlines() if "winner" in ln)
    weighed = head.split()[2:-1:2]
    assert {"ring", "dbtree", "shared"} <= set(weighed) and "hier" not in weighed, res.stdout
    lines = [ln.split() for ln in out.read_text().splitlines() if ln.startswith("allreduce ")]
    assert [int(x[1]) for x in lines] == [8, 512], lines
    assert all(x[2] in weighed for x in lines), lines
    assert any(ln.startswith("key scalecomm-") for ln in out.read_text().splitlines())
    env = {"SCALECOMM_TUNING_FILE": str(out), "SCALECOMM_AUTOTUNE": "model"}
    for names, _ in run_ranks(2, _tuned, str(out), env=env):
        assert names and all(x.split(":")[1] in weighed for x in names), names


@pytest.mark.parametrize(
    ("algos", "said"), [("ring,auto", "auto in a list"), ("ring,bogus", "unknown algorithm bogus")]
)
def test_tune_refuses_what_it_cannot_write_as_a_winner(algos, said):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "pyscalecomm.tune", "--algos", algos, "--nproc", "2"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and said in res.stderr and "give auto alone" in res.stderr, res.stderr


def test_each_collective_lists_its_algorithms_and_refuses_others_by_name():
    import pyscalecomm

    assert pyscalecomm.algorithms("broadcast") == ["chain", "tree"]
    assert pyscalecomm.algorithms("reduce") == ["chain", "tree", "ordered"]
    assert pyscalecomm.algorithms("reduce_scatter") == ["ring", "ordered"]
    assert pyscalecomm.algorithms("allgather") == ["ring"]
    assert pyscalecomm.algorithms("barrier") == ["dissemination", "shared"]
    assert pyscalecomm.algorithms("allreduce") == pyscalecomm.allreduce_algorithms()
    assert pyscalecomm.accepted_algorithms("broadcast") == ["auto", "chain", "tree", "nccl", "mpi"]
    assert pyscalecomm.accepted_algorithms("barrier") == ["auto", "dissemination", "shared", "mpi"]
    with pytest.raises(ValueError, match="unknown collective 'allgatherv'"):
        pyscalecomm.algorithms("allgatherv")
    for msg in run_ranks(2, group_error, {"algorithm": "broadcast:ring"}):
        assert "unknown broadcast algorithm 'ring'; choose one of auto, chain, tree, nccl, mpi" in msg, msg
    for msg in run_ranks(2, group_error, {"algorithm": "reduce_scatter:tree"}):
        choices = "choose one of auto, ring, ordered, nccl, mpi"
        assert f"unknown reduce_scatter algorithm 'tree'; {choices}" in msg, msg
