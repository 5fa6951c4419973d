"""auto measured online: exploration on the user's own calls, one decision on
every rank, the tuning cache written and read back, and what shows it
(stats, tuning(), the INFO log, python -m pyscalecomm.tune --show); the cost
model re-fitted to the cache (tune --fit) and used by simulate --tuning-file."""

import json
import subprocess
import sys

import torch
import torch.distributed as dist
from dist_helpers import ranks_log, run_ranks

# auto measures only when asked; unpaced: the rounds back to back
ONLINE = {"SCALECOMM_AUTOTUNE": "online", "SCALECOMM_AUTO_EXPLORE_PERCENT": "100"}
BLOCK = 16  # calls per trial at 4 KiB (SCALECOMM_AUTO_BLOCK_BYTES 1 MiB: at most 16)


def _decided(be) -> bool:
    return any(b["phase"] == "exploiting" for b in be.tuning())


def _explore(rank, n, calls, count, after_decision=None):
    """`calls` allreduces of `count` floats, each checked exactly; with
    `after_decision`, as many as the exploration takes and then that many
    more (the same number on every rank: they decide at the same call)."""
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    i = 0
    while i < calls or (after_decision is not None and not _decided(be)):
        assert i < 5000, be.tuning()
        t = torch.full((count,), float(rank + 1 + i))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((count,), n * (n + 1) / 2 + n * i)), (i, t[:4])
        i += 1
    for _ in range(after_decision or 0):
        dist.all_reduce(torch.ones(count))
    stats = {k: v["calls"] for k, v in be.stats().items() if k.startswith("allreduce")}
    return be.tuning(), stats, be.tuning_file


def test_online_auto_explores_then_every_rank_runs_the_same_winner():
    # past the decision (and an extension) by 10 calls: before the first drift check
    results = run_ranks(3, _explore, 0, 1024, 10, env=ONLINE)
    tuning0, stats0, _ = results[0]
    assert len(tuning0) == 1, tuning0
    bucket = tuning0[0]
    assert bucket["bytes"] == 4096 and bucket["phase"] == "exploiting" and bucket["source"] == "explored", (
        bucket
    )
    cands = bucket["candidates"]  # those still in at the decision (the others left at a screening or race)
    assert cands, bucket
    winner = bucket["algorithm"]
    assert winner in [c["algorithm"] for c in cands], bucket
    assert bucket["lo_s"] <= bucket["median_s"] <= bucket["hi_s"], bucket
    # 8 measured rounds, every candidate in each (and 16 more for the two an
    # inconclusive decision measures again); those that left ran 2 trials
    # (the screening) or 4 (the race); each trial a block of calls
    trials = {k: v for k, v in stats0.items() if k.endswith(" (trial)")}
    for c in cands:
        assert trials[f"allreduce:{c['algorithm']} (trial)"] == c["trials"], (c, trials)
        assert c["trials"] in [BLOCK * k for k in (8, 24)], (c, trials)
    assert all(v in [BLOCK * k for k in (2, 4, 8, 24)] for v in trials.values()), trials
    assert len(trials) >= 2, trials  # more than one algorithm was measured
    assert stats0[f"allreduce:{winner}"] == 10, stats0
    for tuning, stats, _ in results[1:]:  # every rank: the same decision on the same evidence
        assert tuning[0]["algorithm"] == winner and tuning[0]["median_s"] == bucket["median_s"], tuning
        assert stats == stats0, (stats, stats0)


def _cli(module: str, *args: str) -> str:
    """A pyscalecomm command line's stdout; it must succeed."""
    res = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_the_decision_is_cached_and_the_next_group_starts_from_it(tmp_path):
    path = tmp_path / "cache.txt"
    env = {**ONLINE, "SCALECOMM_TUNING_FILE": str(path)}
    first = run_ranks(2, _explore, 0, 1024, 0, env=env)
    winner = first[0][0][0]["algorithm"]
    text = path.read_text()
    assert "key scalecomm-" in text and f"allreduce 4096 {winner} " in text, text
    # The key names the processor: a VM of one name moves between processors, which rank differently.
    cpu = next(
        (ln.split(":", 1)[1].split() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), ["?"]
    )
    assert f" cpu={'_'.join(cpu) or '?'} " in text, text
    assert " trial=1048576 " in text, text  # and how a trial times the candidates
    second = run_ranks(2, _explore, 10, 1024, env=env)
    for tuning, stats, file in second:
        assert file == str(path)
        assert tuning[0]["source"] == "cache" and tuning[0]["algorithm"] == winner, tuning
        assert stats == {f"allreduce:{winner}": 10}, stats  # no exploration
    # The cache keys what it measured: another layout (here the window size) starts afresh.
    third = run_ranks(2, _explore, 3, 1024, env={**env, "SCALECOMM_SHM_WINDOW_BYTES": 65536})
    assert third[0][0][0]["source"] in ("", "model"), third[0][0]  # exploring, or the model's only candidate
    # And python -m pyscalecomm.tune --show prints it.
    out = _cli("pyscalecomm.tune", "--show", str(path))
    assert "measured for: scalecomm-" in out and winner in out, out
    # tune --fit re-fits the cached model to the measured medians and stores it.
    before = path.read_text()
    assert "model alpha=" in before and "layout window=" in before and " size=4096 " in before
    # The probe timed the shared windows' copies (their own rate, not the links').
    assert float(before.split("window_beta=")[1].split()[0]) > 0, before
    out = _cli("pyscalecomm.tune", "--fit", str(path))
    assert "measured medians; median |error|" in out and "after the fit" in out, out
    fitted = path.read_text()
    assert fitted != before and "call=" in fitted, fitted
    # simulate prices bench points with the fitted model beside the probed one.
    bench = tmp_path / "bench.jsonl"
    model = {"alpha": 2e-6, "beta": 1e-9, "overhead": 2e-6, "gamma": 0.0, "intra_alpha": -1.0, "call": 0.0}
    record = {"backend": "scalecomm", "algorithm": "ring", "world_size": 2, "bytes": 4096, "time_us": 20.0}
    bench.write_text(json.dumps({**record, "model": model, "window_bytes": 262144}) + "\n")
    out = _cli("pyscalecomm.simulate", "--measured", str(bench), "--tuning-file", str(path))
    assert "# world 2: 1 points" in out and "fitted model: median" in out, out


def _quiet(rank, n):
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    for _ in range(5000):
        dist.all_reduce(torch.ones(16))
        if _decided(be):
            return "ok"
    raise AssertionError(be.tuning())


def test_each_decision_is_logged_with_its_evidence(tmp_path):
    log = ranks_log(2, "test_autotune", "_quiet", {**ONLINE, "SCALECOMM_DEBUG": "INFO"})
    lines = [ln for ln in log if "auto measured allreduce of up to 64 bytes" in ln]
    assert len(lines) == 2, log[-40:]  # one per rank, the same decision
    assert lines[0].split("rank ")[1][2:] == lines[1].split("rank ")[1][2:], lines
    assert " us" in lines[0] and "picks " in lines[0], lines


def test_model_mode_measures_nothing():
    for tuning, stats, _ in run_ranks(2, _explore, 30, 1024, env={"SCALECOMM_AUTOTUNE": "model"}):
        assert tuning == [], tuning
        assert not any(k.endswith("(trial)") for k in stats), stats


def _paced(rank, n, calls):
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    for i in range(calls):
        t = torch.full((1024,), float(rank + 1 + i))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((1024,), n * (n + 1) / 2 + n * i)), (i, t[:4])
    stats = {k: v["calls"] for k, v in be.stats().items() if k.startswith("allreduce")}
    return be.tuning(), stats


def _share_behind_queued_calls(rank, n, calls):
    # `calls` asynchronous calls are queued (rank 1 late, so its worker is
    # still busy); the share set after them applies after them on both ranks.
    import time

    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    if rank == 1:
        time.sleep(0.2)
    ts = [torch.full((1024,), float(rank + 1 + i)) for i in range(calls)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    share = be.set_auto_explore_percent(100)
    for w in works:
        w.wait()
    queued = be.tuning()[0]["paced"]
    for i in range(64):
        dist.all_reduce(ts[i])
    for i, t in enumerate(ts[64:], 64):
        assert torch.equal(t, torch.full((1024,), n * (n + 1) / 2 + n * i)), (i, t[:4])
    b = be.tuning()[0]
    return share, queued, {k: b[k] for k in ("calls", "paced", "trials", "phase", "leader")}


def test_a_share_set_behind_queued_calls_applies_after_them_on_every_rank():
    env = {"SCALECOMM_AUTOTUNE": "online", "SCALECOMM_TUNING_FILE": "none"}
    (share, queued, bucket), other = run_ranks(2, _share_behind_queued_calls, 200, env=env)
    assert share == 2 and queued == 200, (share, queued)  # the queued calls all paced at 2%
    assert bucket["paced"] == 200 and bucket["trials"] > 0, bucket  # then trials back to back
    assert other == (share, queued, bucket), other


def test_by_default_an_exploration_waits_within_its_budget_running_the_models_choice():
    # 4 KiB: 16-call trials of up to 6 candidates; within 2% of the bucket's
    # time the model's predictions put far more than 300 calls of its choice
    # before the first round: a 300-call run measures nothing.
    env = {"SCALECOMM_AUTOTUNE": "online", "SCALECOMM_TUNING_FILE": "none"}
    results = run_ranks(2, _paced, 300, env=env)
    tuning, stats = results[0]
    bucket = tuning[0]
    assert bucket["phase"] == "exploring" and bucket["trials"] == 0, bucket
    assert bucket["paced"] == 300 and bucket["leader"] == bucket["candidates"][0]["algorithm"], bucket
    assert stats == {f"allreduce:{bucket['leader']}": 300}, stats
    assert results[1][0][0]["paced"] == 300 and results[1][1] == stats, results[1]
    # Unpaced, the same run measures its candidates in blocks of calls.
    tuning, stats = run_ranks(2, _paced, 300, env={**env, "SCALECOMM_AUTO_EXPLORE_PERCENT": "100"})[0]
    assert tuning[0]["paced"] == 0 and tuning[0]["trials"] > 0, tuning
    assert any(k.endswith(" (trial)") for k in stats), stats


def test_tune_keeps_a_winner_only_beyond_both_spreads():
    from pyscalecomm.tune import decide, parse_args

    assert parse_args([]).rounds >= 5  # enough rounds for a spread by default
    assert decide({"ring": [1.0, 1.1, 1.2], "rhd": [2.0, 2.1, 2.2]}) == ("ring", "ring")
    # overlapping rounds (the same schedule at 2 ranks, or noise): a tie, left to auto's online measurement
    assert decide({"ring": [1.0, 1.5, 2.0], "tree": [1.2, 1.3, 1.4]}) == (None, "tie:tree,ring")
    assert decide({"shared": [3.0]}) == ("shared", "shared")


def test_tune_show_prints_the_sizes_left_to_auto(tmp_path):
    """A tie tune wrote as a comment (no winner line, so auto measures the
    size online) shows in --show's table, not only in the file."""
    import io

    from pyscalecomm.tune import show

    path = tmp_path / "tuning.txt"
    path.write_text(
        "key world=2 hosts=1\nworld 2\nallreduce 1024 ring\n"
        "# allreduce 8 tie:tree,ring within each other's rounds: measured online\n"
    )
    out = io.StringIO()
    assert show([str(path)], out) == 0
    lines = out.getvalue().splitlines()
    assert any(line.split()[:2] == ["8", "tie:tree,ring"] and "auto measures" in line for line in lines), (
        lines
    )
    assert any(line.split()[:2] == ["1024", "ring"] for line in lines), lines
