"""Benchmark and driver CLIs: smoke runs with tiny sizes, output schema, busbw formula."""

import argparse
import json
import os
import subprocess
import sys

import pytest

from pyscalecomm.bench import parse_size, sizes
from pyscalecomm.bench.specs import COLLECTIVES, busbw_factor, element_count

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_size_parsing_and_busbw_factors():
    assert parse_size("8") == 8 and parse_size("64K") == 65536 and parse_size("1M") == 1 << 20
    assert sizes(8, 128, 4, 0) == [8, 32, 128]
    assert sizes(8, 24, 2, 8) == [8, 16, 24]
    # nccl-tests: allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n; broadcast, reduce 1
    assert busbw_factor("allreduce", 4) == 1.5 and busbw_factor("allreduce", 2) == 1.0
    for c in ("reduce_scatter", "allgather", "alltoall"):
        assert busbw_factor(c, 4) == 0.75
    assert busbw_factor("broadcast", 4) == 1.0 and busbw_factor("reduce", 8) == 1.0
    assert all(busbw_factor(c, 1) == 1.0 for c in COLLECTIVES)
    # sizes are of the whole buffer; split collectives round to a multiple of the world size
    assert element_count("allgather", 40, 4, 4) == 8 and element_count("allreduce", 40, 4, 4) == 10
    assert element_count("alltoall", 4, 4, 3) == 3


def _run(args, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )


def _table_rows(stdout):
    return [ln.split() for ln in stdout.splitlines() if ln.strip() and not ln.startswith("#")]


def test_bench_every_collective_in_and_out_of_place_with_json_and_plot(tmp_path):
    args = ["pyscalecomm.bench", "--nproc", "2", "-b", "8", "-e", "4K", "-f", "8", "-n", "3", "-w", "1"]
    args += ["--rounds", "2", "--min-time", "0", "--collectives", "all", "--algos", "ring,rhd,chain,auto"]
    args += ["--json", "r.jsonl", "--plot", "p.png"]
    out = _run(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    for c in COLLECTIVES:
        assert f"# {c}: busbw = algbw x" in text, text
        assert "Avg bus bandwidth" in text and f"({c}, gloo)" in text
    assert "out-of-place" in text and "in-place" in text and "#wrong" in text
    assert text.rstrip().endswith("# plot: p.png") and "# Out of bounds values : 0 OK" in text
    rows = _table_rows(text)
    assert {r[5] for r in rows} >= {
        "scalecomm:ring",
        "scalecomm:rhd",
        "scalecomm:chain",
        "scalecomm:auto",
        "gloo",
    }
    assert (tmp_path / "p.png").stat().st_size > 10_000
    records = [json.loads(ln) for ln in open(tmp_path / "r.jsonl")]
    keys = {
        "collective",
        "implementation",
        "backend",
        "algorithm",
        "world_size",
        "bytes",
        "count",
        "dtype",
        "op",
    }
    keys |= {
        "inplace",
        "time_us",
        "time_us_min",
        "time_us_avg",
        "time_us_max",
        "algbw_GBps",
        "busbw_GBps",
        "wrong",
    }
    for r in records:
        assert keys <= set(r), set(r) ^ keys
        assert r["wrong"] == 0, r
        assert r["time_us_min"] <= r["time_us_avg"] <= r["time_us_max"]
        assert abs(r["busbw_GBps"] - r["algbw_GBps"] * busbw_factor(r["collective"], 2)) < 1e-9
        assert abs(r["algbw_GBps"] - r["bytes"] / (r["time_us"] * 1e-6) / 1e9) < 1e-9 * max(
            1, r["algbw_GBps"]
        )
    # ring/rhd apply to allreduce, chain to broadcast and reduce; alltoall has no in-place form
    by = {(r["collective"], r["implementation"], r["inplace"]) for r in records}
    assert ("allreduce", "scalecomm:rhd", True) in by and ("broadcast", "scalecomm:chain", False) in by
    assert ("broadcast", "scalecomm:rhd", True) not in by and ("alltoall", "scalecomm", True) not in by
    assert ("allgather", "scalecomm:ring", True) in by and ("alltoall", "gloo", False) in by
    assert len({r["bytes"] for r in records if r["collective"] == "allreduce"}) == 4
    import pyscalecomm

    # auto's allreduce rows say what it ran (online: settled before the rounds), the others nothing
    auto = [r for r in records if r["implementation"] == "scalecomm:auto"]
    ran = {r["ran"] for r in auto if r["collective"] == "allreduce"}
    assert ran and ran <= set(pyscalecomm.algorithms("allreduce")), ran
    assert all(r["ran"] is None for r in auto if r["collective"] != "allreduce"), auto


@pytest.mark.parametrize("n", [2, 3, 6, 7])
def test_round_order_puts_every_column_behind_every_other(n):
    # A capped link's token bucket or the caches are left by the column
    # before: over a full cycle of rounds each column runs first equally
    # often and follows each other column equally often.
    from pyscalecomm.bench.timing import round_order

    cycle = 2 * n if n % 2 else n
    follows, first = {}, {}
    for r in range(cycle):
        order = round_order(range(n), r)
        assert sorted(order) == list(range(n))
        first[order[0]] = first.get(order[0], 0) + 1
        for a, b in zip(order[:-1], order[1:], strict=True):
            follows[a, b] = follows.get((a, b), 0) + 1
    assert set(first.values()) == {cycle // n}
    assert all(follows.get((a, b), 0) == cycle // n for a in range(n) for b in range(n) if a != b), follows


def _settle(rank, n):
    import torch
    import torch.distributed as dist

    from pyscalecomm.bench import settle_auto

    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    t = torch.ones(1024)
    calls = []
    settle_auto(lambda: (calls.append(1), dist.all_reduce(t)), be, 4096)
    bucket = [b for b in be.tuning() if b["bytes"] == 4096]
    others = {k: v["calls"] for k, v in be.stats().items() if not k.startswith("allreduce")}
    share = be.set_auto_explore_percent(50)  # what settling left
    with pytest.raises(ValueError, match="set_auto_explore_percent .rank .*: 0 is outside 1..100"):
        be.set_auto_explore_percent(0)
    return len(calls), bucket[0]["phase"], bucket[0]["algorithm"], bucket[0]["paced"], others, share


def test_settling_auto_stops_every_rank_at_the_same_call_without_a_collective_of_its_own():
    # With the default 2% budget the 4 KiB exploration would wait thousands
    # of calls before its first trial; settling runs it back to back, then
    # gives the group its share back.
    from dist_helpers import run_ranks

    env = {"SCALECOMM_AUTOTUNE": "online", "SCALECOMM_TUNING_FILE": "none"}
    results = run_ranks(2, _settle, env=env)
    calls, phase, _, paced, others, share = results[0]
    # Back to back it settles in a few hundred calls on a quiet machine (1,280 seen beside
    # other work); paced, its first trial alone would wait thousands.
    assert phase == "exploiting" and calls % 8 == 0 and calls < 2000, results
    assert paced == 0 and share == 2, results
    assert results[0] == results[1], results  # same calls, same choice
    assert others == {}, results  # nothing but the settling calls ran on the group


def test_result_check_counts_wrong_elements():
    import torch

    from pyscalecomm.bench.specs import make_case

    case = make_case("allgather", 8, torch.float32, rank=1, n=2, inplace=True)
    case.fill()
    assert case.inp.tolist() == [2.0] * 4 and case.wrong() == 4  # rank 0's block still poisoned
    case.out.copy_(torch.tensor([1, 1, 1, 1, 2, 2, 2, 9.0]))
    assert case.wrong() == 1
    case = make_case("alltoall", 4, torch.int32, rank=0, n=2, inplace=False)
    case.fill()
    assert case.inp.tolist() == [1, 1, 2, 2] and case.wrong() == 4
    case.out.copy_(torch.tensor([1, 1, 3, 3]))  # block q of rank 0's output is rank q's block 0
    assert case.wrong() == 0
    case = make_case("reduce", 3, torch.float64, rank=1, n=3, inplace=True, root=0, op="max")
    case.fill()
    assert case.wrong() == 0  # nothing to check off the root
    case = make_case("reduce_scatter", 6, torch.float32, rank=2, n=3, inplace=True, op="prod")
    case.fill()
    case.out.fill_(6.0)  # 1 * 2 * 3
    assert case.wrong() == 0 and case.out.data_ptr() == case.inp[4:].data_ptr()


needs_mpirun = pytest.mark.skipif(
    __import__("shutil").which("mpirun") is None or not __import__("pyscalecomm").built_with_mpi(),
    reason="needs mpirun and a build with MPI",
)


def _mpirun_bench(tmp_path, args):
    """``python -m pyscalecomm.bench ARGS`` on 2 ranks under mpirun, in ``tmp_path``."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = ["mpirun", "-n", "2", "--bind-to", "none"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    cmd += [sys.executable, "-m", "pyscalecomm.bench", *args]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return out


@needs_mpirun
def test_bench_under_mpirun_with_mpi_baseline(tmp_path):
    args = ["-b", "1K", "-e", "4K", "-f", "4", "-n", "3", "-w", "1"]
    args += ["--collectives", "allreduce,allgather", "--algos", "ring,mpi", "--baselines", "gloo,mpi"]
    out = _mpirun_bench(tmp_path, args)
    rows = _table_rows(out.stdout)
    labels = {r[5] for r in rows}
    assert labels == {"scalecomm:ring", "scalecomm:mpi", "gloo", "mpi"}, labels
    assert "(allreduce, mpi)" in out.stdout and "# Out of bounds values : 0 OK" in out.stdout


@needs_mpirun
def test_bench_direct_api_rows_with_cpu_time_beside_mpi(tmp_path):
    """--api direct: scalecomm's rows through pyscalecomm.allreduce, checked
    like the others; every row carries its CPU time per call."""
    args = ["-b", "8", "-e", "4K", "-f", "16", "-n", "3", "-w", "1", "--rounds", "2", "--min-time", "0"]
    args += ["--api", "direct", "--algos", "ring,auto", "--baselines", "mpi,gloo", "--json", "r.jsonl"]
    out = _mpirun_bench(tmp_path, args)
    assert "through the direct API" in out.stdout and "cpu(us)" in out.stdout
    assert "# Out of bounds values : 0 OK" in out.stdout
    records = [json.loads(ln) for ln in open(tmp_path / "r.jsonl")]
    assert {r["implementation"] for r in records} == {"scalecomm:ring", "scalecomm:auto", "mpi", "gloo"}
    assert all(r["cpu_us"] > 0 and r["wrong"] == 0 for r in records), records
    refused = _run(["pyscalecomm.bench", "--api", "direct", "--collectives", "all"], tmp_path)
    assert refused.returncode == 2 and "the direct API has allreduce only" in refused.stderr


def test_bench_refuses_a_deepspeed_baseline_without_deepspeed_in_the_parent(monkeypatch, capsys):
    import importlib.util

    from pyscalecomm.bench import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a)
    )
    with pytest.raises(SystemExit) as refused:
        cli.parse_args(["--baselines", "deepspeed,gloo", "-b", "8", "-e", "8"])
    assert refused.value.code == 2
    assert "--baselines deepspeed needs DeepSpeed (pip install deepspeed)" in capsys.readouterr().err


def test_bench_deepspeed_baseline_runs_in_place_beside_scalecomm(tmp_path):
    """DeepSpeed's CPU shared-memory allreduce as a column: in place only (it
    has no out-of-place call), checked like every row."""
    pytest.importorskip("deepspeed")
    args = ["pyscalecomm.bench", "--nproc", "2", "-b", "8", "-e", "4K", "-f", "16", "-n", "3", "-w", "1"]
    args += ["--rounds", "1", "--min-time", "0", "--baselines", "deepspeed,gloo", "--json", "r.jsonl"]
    out = _run(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "# Out of bounds values : 0 OK" in out.stdout and "(allreduce, deepspeed)" in out.stdout
    records = [json.loads(ln) for ln in open(tmp_path / "r.jsonl")]
    ds = [r for r in records if r["implementation"] == "deepspeed"]
    assert {r["inplace"] for r in ds} == {True} and len(ds) == 3, ds
    assert all(r["wrong"] == 0 for r in ds), ds


def test_bench_on_a_loaded_machine_starts_and_ends_its_busy_processes(tmp_path):
    args = ["pyscalecomm.bench", "--nproc", "2", "-b", "8", "-e", "8", "-n", "3", "-w", "1", "--rounds", "1"]
    out = _run([*args, "--min-time", "0", "--busy", "2"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 busy process(es) spinning beside the ranks" in out.stdout
    left = subprocess.run(["pgrep", "-f", "parent, end = os.getppid"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout  # none outlives the run


def test_simulate_prices_every_algorithm_and_names_a_winner(tmp_path):
    out = _run(
        [
            "pyscalecomm.simulate",
            "--world",
            "1024",
            "--bytes",
            "256M",
            "--alpha",
            "5us",
            "--rate",
            "100Gbit",
        ],
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    rows = {
        ln.split()[0]: float(ln.split()[1])
        for ln in out.stdout.splitlines()
        if ln.split()[0] in ("ring", "rhd", "direct")
    }
    assert set(rows) == {"ring", "rhd", "direct"}
    # ring's closed form: 2 (n-1) (alpha + N/n / bandwidth)
    n, nbytes = 1024, 256 << 20
    want = 2 * (n - 1) * (5e-6 + nbytes / n / 12.5e9)
    assert abs(rows["ring"] * 1e-6 - want) / want < 1e-3
    assert f"winner: {min(rows, key=rows.get)}" in out.stdout


def test_simulate_parses_units():
    from pyscalecomm.simulate import parse_rate, parse_time  # the shared parser (pyscalecomm.units)

    assert abs(parse_time("5us") - 5e-6) < 1e-15 and abs(parse_time("1.5ms") - 1.5e-3) < 1e-15
    assert parse_rate("100Gbit") == 12.5e9 and parse_rate("10GB") == 10e9
    # Bits are b, bytes B, whatever follows: 100Gbps is 100 gigabits, not 800.
    assert parse_rate("100Gbps") == parse_rate("100Gb/s") == parse_rate("12.5GB/s") == 12.5e9
    assert parse_rate("10kbit") == 1250.0
    for bad in ("100", "100gb", "100mb", "5 apples"):  # no unit, or one that could mean either
        with pytest.raises(argparse.ArgumentTypeError, match="give a unit"):
            parse_rate(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="give a unit"):
        parse_time("5")  # 5 seconds or 5 us? refused


def test_every_tool_reads_rates_the_same(capsys):
    from pyscalecomm import cluster
    from pyscalecomm.train import cli
    from pyscalecomm.units import parse_rate, tc_rate

    assert parse_rate("1gbit") == parse_rate("1Gbit") == parse_rate("1Gbps") == 1.25e8
    assert parse_rate("125MB/s") == 1.25e8
    assert tc_rate(parse_rate("10Gbps")) == "10000000000bit"  # tc's spelling that cannot be misread
    with pytest.raises(argparse.ArgumentTypeError, match="lower-case 'bps' is bytes to tc"):
        parse_rate("1gbps")
    assert cluster.parse_args(["--hosts", "2", "--rate", "10Gbps", "--", "true"]).rate == "10Gbps"
    for parse in (
        lambda r: cluster.parse_args(["--hosts", "2", "--rate", r, "--", "true"]),
        lambda r: cli.parse_args(["--cluster-rate", r]),
    ):
        for bad in ("1gbps", "100", "fast"):
            with pytest.raises(SystemExit):
                parse(bad)
    assert "not a rate: '1gbps'" in capsys.readouterr().err


def test_bench_compressed_rows_report_codec_wire_bytes_and_error(tmp_path):
    args = ["pyscalecomm.bench", "--nproc", "2", "-b", "64K", "-e", "64K", "-n", "2", "-w", "1"]
    args += ["--rounds", "3", "--min-time", "0"]
    out = _run(args + ["--compress", "topk:0.01,fp16", "--json", "c.jsonl"], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    # lossy rows are labelled so, and never the winner (gloo or scalecomm is)
    assert "codec rows are lossy" in out.stdout
    for line in out.stdout.splitlines():
        assert not ("scalecomm:topk" in line and "winner" in line), line
        assert not ("scalecomm:fp16" in line and "winner" in line), line
    rows = [json.loads(line) for line in open(tmp_path / "c.jsonl")]
    topk = [r for r in rows if r["codec"] == "topk:0.01"]
    assert topk and topk[0]["wire_bytes"] == 8 * round(16384 * 0.01) and 0.5 < topk[0]["relerr"] <= 1.0
    fp16 = [r for r in rows if r["codec"] == "fp16"][0]
    assert fp16["wire_bytes"] == 2 * 16384 and fp16["relerr"] < 1e-3
    assert "scalecomm:topk:0.01" in out.stdout


def test_bench_measures_the_parameter_server_over_each_server_count(tmp_path):
    args = ["pyscalecomm.bench", "--nproc", "3", "-b", "1K", "-e", "8K", "-f", "8", "-n", "2", "-w", "1"]
    args += ["--rounds", "1", "--min-time", "0"]
    out = _run([*args, "--collectives", "ps", "--json", "ps.jsonl"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "# ps: async, 16 keys, servers ranks 0..S-1, 3 workers" in out.stdout
    head = next(line for line in out.stdout.splitlines() if "step(us)" in line)
    assert "±%" in head, head  # each row's spread over the rounds, as the collectives' rows
    records = [json.loads(ln) for ln in (tmp_path / "ps.jsonl").read_text().splitlines()]
    got = {(r["bytes"], r["backend"], r["servers"]) for r in records}
    assert got == {(b, k, s) for b in (1024, 8192) for k in ("scalecomm", "gloo") for s in (1, 2, 3)}
    for r in records:
        assert r["requests_per_s"] == pytest.approx(2 * 3 * r["servers"] / (r["time_us"] * 1e-6))
        assert r["GBps"] == pytest.approx(2 * 3 * r["bytes"] / (r["time_us"] * 1e-6) / 1e9)
    bad = _run([*args, "--collectives", "ps", "--device", "cuda"], tmp_path)
    assert bad.returncode == 2 and "runs on the CPU" in bad.stderr


def test_bench_refuses_an_unknown_algorithm_with_the_choices(tmp_path):
    args = ["pyscalecomm.bench", "--nproc", "2", "--algos", "ring,rng", "-b", "8", "-e", "8", "--rounds", "1"]
    out = _run(args, tmp_path)
    assert out.returncode == 2 and "unknown algorithm 'rng' in --algos; choose from auto, chain" in out.stderr


def test_bench_defaults_report_a_median_round_with_its_spread():
    """With no flags the bench times several rounds and loops long enough for
    small sizes, and reports the median round, not the fastest."""
    from pyscalecomm.bench import parse_args
    from pyscalecomm.bench.cli import median_round
    from pyscalecomm.bench.rows import Row

    args = parse_args([])
    assert args.rounds >= 5 and args.min_time >= 0.01
    shape = dict(collective="allreduce", implementation="gloo", backend="gloo", algorithm="gloo")
    shape |= dict(world_size=2)
    shape |= dict(bytes=8, count=2, dtype="float", op="sum", root=-1, inplace=True, time_us_min=0.0)
    shape |= dict(time_us_avg=0.0, time_us_max=0.0, time_stat="avg", busbw_factor=1.0, iters=1)
    shape |= dict(warmup_iters=0, rounds=3)
    rounds = [Row(time_us=t, wrong=w, **shape) for t, w in ((50.0, 0), (10.0, 0), (30.0, 2))]
    row = median_round(rounds)
    assert row.time_us == 30.0 and row.time_us_rounds == [50.0, 10.0, 30.0]
    assert row.wrong == 2  # the check covers every round
    assert abs(row.spread - 40.0 / 30.0) < 1e-12  # wide: the table marks it noisy


def test_a_codec_is_never_the_winner_over_an_exact_implementation():
    from pyscalecomm.bench.cli import pick_winner

    bw = {"scalecomm": 2.0, "gloo": 1.0, "scalecomm:topk:0.01": 40.0}
    assert pick_winner(bw, {"scalecomm:topk:0.01"}) == "scalecomm"
    assert pick_winner({"scalecomm": 2.0, "scalecomm:fp16": 3.0}, {"scalecomm:fp16"}) == ""


def test_a_cli_mistake_fails_in_the_parent_with_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = _run(["pyscalecomm.bench", "--nproc", "2", "--device", "cuda", "-b", "8", "-e", "8"], tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--device cuda: this machine has no usable GPU" in out.stderr
    assert "Traceback" not in out.stderr, out.stderr


def test_the_kernel_bench_checks_and_times_every_row_on_the_cpu(tmp_path):
    # On a GPU it times the CUDA kernels (scripts/gpu_check.sh); here, the same rows on host tensors.
    out = tmp_path / "k.json"
    p = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "cuda_kernels.py"), "--device", "cpu", "--size-mib", "1",
         "--rounds", "2", "--iters", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {(r["row"], r["dtype"]) for r in json.loads(out.read_text())["rows"]}
    for dt in ("fp32", "bf16", "fp16"):
        for row in ("scalecomm sum", "torch sum", "scalecomm avg", "torch avg"):
            assert (row, dt) in rows
    assert "| scalecomm sum | bf16 |" in p.stdout and "of copy" in p.stdout
