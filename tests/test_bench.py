"""Benchmark and driver CLIs: smoke runs with tiny sizes, output schema, busbw formula."""

import json
import os
import subprocess
import sys

from pyscalecomm.bench import busbw_factor, parse_size, sizes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_size_parsing_and_busbw_factor():
    assert parse_size("8") == 8 and parse_size("64K") == 65536 and parse_size("1M") == 1 << 20
    assert sizes(8, 128, 4, 0) == [8, 32, 128]
    assert sizes(8, 24, 2, 8) == [8, 16, 24]
    assert busbw_factor(2) == 1.0 and busbw_factor(4) == 1.5 and busbw_factor(1) == 1.0


def _run(args, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )


def test_bench_prints_nccl_tests_columns_and_json(tmp_path):
    out = _run(
        [
            "pyscalecomm.bench",
            "--nproc",
            "2",
            "-b",
            "8",
            "-e",
            "4K",
            "-f",
            "8",
            "-n",
            "3",
            "-w",
            "1",
            "--algos",
            "ring,rhd",
            "--json",
            "r.jsonl",
        ],
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if not ln.startswith("#")]
    assert (
        "scalecomm:ring" in lines[0] and "gloo" in lines[0] and "busbw" in lines[0] and "#wrong" in lines[0]
    )
    rows = lines[2:]
    assert [int(r.split()[0]) for r in rows] == [8, 64, 512, 4096]
    records = [json.loads(ln) for ln in open(tmp_path / "r.jsonl")]
    assert len(records) == 4 * 3
    assert {r["algorithm"] for r in records} == {"ring", "rhd", "gloo"}
    assert all(r["wrong"] == 0 for r in records)
    for r in records:
        assert abs(r["busbw_gbps"] - r["algbw_gbps"] * busbw_factor(2)) < 1e-9


def test_train_compare_runs_and_reports_parity(tmp_path):
    out = _run(["pyscalecomm.train_compare", "--nproc", "2", "--epochs", "1"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "scalecomm" in out.stdout and "gloo" in out.stdout
    assert "bit-identical" in out.stdout, out.stdout


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
            "--bandwidth",
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
    from pyscalecomm.simulate import parse_rate, parse_time

    assert abs(parse_time("5us") - 5e-6) < 1e-15 and abs(parse_time("1.5ms") - 1.5e-3) < 1e-15
    assert parse_rate("100Gbit") == 12.5e9 and parse_rate("10GB") == 10e9
