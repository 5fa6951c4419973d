"""The timeline (SCALECOMM_TIMELINE) and its summary (python -m pyscalecomm.profile)."""

import json

import torch
import torch.distributed as dist
from dist_helpers import run_ranks

from pyscalecomm import profile


def _work(rank, n):
    for _ in range(3):
        dist.all_reduce(torch.ones(100_000))
    dist.broadcast(torch.ones(1000), src=0)
    return True


def test_timeline_has_collective_and_step_spans_per_rank(tmp_path, capsys):
    pattern = str(tmp_path / "traces" / "run-1" / "trace-{rank}.json")  # folders made as needed
    run_ranks(2, _work, env={"SCALECOMM_TIMELINE": pattern, "SCALECOMM_ALGO": "ring"})
    files = [tmp_path / "traces" / "run-1" / f"trace-{r}.json" for r in range(2)]
    for rank, f in enumerate(files):
        events = profile.load_events(str(f))
        colls = [e for e in events if e["cat"] == "collective"]
        assert [e["name"] for e in colls].count("allreduce:ring") == 3, colls
        assert any(e["name"].startswith("broadcast:") for e in colls), colls
        assert all(e["pid"] == rank and e["ph"] == "X" for e in events)
        steps = [e for e in events if e["cat"] == "step"]
        phases = {e["name"] for e in steps}
        assert {"send", "recv+reduce", "recv"} <= phases, phases
        for e in steps:
            if e["name"] != "wait":
                assert e["args"]["peer"] == 1 - rank and e["args"]["transport"] == "shm", e
                assert e["args"]["bytes"] > 0, e
            # every step span lies inside a collective span of the same row
            assert any(c["ts"] - 1 <= e["ts"] <= c["ts"] + c["dur"] + 1 for c in colls), e
        # ring at 2 ranks: reduce-scatter sends half the buffer, allgather the other half
        ring_send = sum(
            e["args"]["bytes"] for e in steps if e["name"] == "send" and e["args"]["algorithm"] == "ring"
        )
        assert ring_send == 3 * 2 * 200_000, ring_send
    assert profile.main([str(f) for f in files]) == 0
    out = capsys.readouterr().out
    assert "allreduce:ring" in out and "recv+reduce" in out, out
    assert profile.main(["--skew"] + [str(f) for f in files]) == 0
    out = capsys.readouterr().out
    assert "allreduce:ring 400000 B" in out and "last to start" in out, out


def test_profile_reads_a_trace_cut_off_mid_write(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(
        '[\n{"name":"allreduce:rhd","cat":"collective","ph":"X","pid":0,"tid":0,"ts":10,"dur":100,"args":{}},\n'
        '{"name":"send","cat":"step","ph":"X","pid":0,"tid":0,"ts":20,"dur":50,"args":{"bytes":4000}},\n'
    )
    s = profile.summarise(profile.load_events(str(f)))
    assert s["allreduce:rhd"]["calls"] == 1 and s["allreduce:rhd"]["phases"]["send"]["bytes"] == 4000


def _span(rank, seq, ts, dur, name="allreduce:ring", nbytes=4000):
    args = {"seq": seq, "bytes": nbytes, "group": "1"}
    return {
        "name": name,
        "cat": "collective",
        "ph": "X",
        "pid": rank,
        "tid": 0,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def test_skew_lines_up_each_collective_across_ranks(tmp_path, capsys):
    events = [
        _span(0, 1, 0, 100),  # rank 1 starts 30 us late; they end 10 us apart
        _span(1, 1, 30, 80),
        _span(0, 2, 200, 50),  # rank 0 starts 5 us late and ends 20 us after rank 1
        _span(1, 2, 195, 35),
        _span(0, 3, 400, 10),  # only rank 0 traced it: left out
        _span(0, 4, 500, 10, nbytes=8),  # another size: a row of its own
        _span(1, 4, 500, 12, nbytes=8),
    ]
    sk = profile.skew(events)
    row = sk["allreduce:ring 4000 B"]
    assert row["calls"] == 2 and row["start_us"] == [30, 5] and row["end_us"] == [10, 20]
    assert row["last_start"] == {1: 1, 0: 1} and row["last_end"] == {1: 1, 0: 1}
    assert sk["allreduce:ring 8 B"]["calls"] == 1
    f = tmp_path / "t.json"
    f.write_text(json.dumps(events))
    assert profile.main(["--skew", str(f)]) == 0
    assert "allreduce:ring 4000 B" in capsys.readouterr().out


def _allreduce_sum(rank, n):
    x = torch.full((1000,), float(rank + 1))
    dist.all_reduce(x)
    return float(x[0])


def test_nvtx_ranges_leave_results_alone():
    # SCALECOMM_NVTX=1 opens an NVTX range per collective (CUDA builds); with no
    # tool attached NVTX does nothing visible, so this checks the path runs.
    results = run_ranks(2, _allreduce_sum, env={"SCALECOMM_NVTX": "1"})
    assert results == [3.0, 3.0]


_CLEAN_EXIT = """
import torch, torch.distributed as dist, pyscalecomm
dist.init_process_group("scalecomm", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
dist.all_reduce(torch.ones(1000))
dist.destroy_process_group()
"""


def test_a_clean_exit_leaves_strict_json_and_profile_takes_the_variable_s_value(tmp_path, capsys):
    import os
    import subprocess
    import sys

    from dist_helpers import free_port

    value = str(tmp_path / "t.json")  # what SCALECOMM_TIMELINE was set to
    env = {**os.environ, "SCALECOMM_TIMELINE": value, "RANK": "0"}
    out = subprocess.run(
        [sys.executable, "-c", _CLEAN_EXIT.format(port=free_port())], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    written = tmp_path / "t.rank0.json"
    events = json.loads(written.read_text())  # strict JSON: the array is closed
    assert any(e["cat"] == "collective" for e in events), events
    # the variable's value, not a file
    assert profile.main([value, "--merge", str(tmp_path / "all.json")]) == 0
    assert "allreduce" in capsys.readouterr().out
    merged = json.loads((tmp_path / "all.json").read_text())
    assert len(merged["traceEvents"]) == len(events)
    assert profile.main([str(tmp_path / "none.json")]) == 2
    assert "no timeline at" in capsys.readouterr().err
