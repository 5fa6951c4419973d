"""`python -m pyscalecomm doctor`: each check provoked, and the whole report
on this machine; a torch mismatch named at import."""

import os
import shutil
import subprocess
import sys

import pytest

import pyscalecomm
from pyscalecomm import doctor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _doctor(*args, prefix=()):
    cmd = [*prefix, sys.executable, "-m", "pyscalecomm", "doctor", *args]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)


def test_the_whole_report_runs_here_with_a_measured_check():
    out = _doctor("--nproc", "2")
    # ok on a quiet machine; warn (with what to do) where the ranks wait for a core
    assert "2-rank allreduce: exact; 8 B in" in out.stdout, out.stdout + out.stderr
    assert "torch's dispatch" in out.stdout and "one memcpy" in out.stdout, out.stdout
    assert "checks: 0 failed" in out.stdout and out.returncode == 0, out.stdout
    # the settings at their defaults are one line, not one each; progress before the measured part
    assert "other settings:" in out.stdout and "(default)" not in out.stdout, out.stdout
    assert out.stdout.index("... timing a 2-rank allreduce") < out.stdout.index("2-rank allreduce: exact")


def test_a_slow_measurement_is_judged_against_this_machine():
    quiet = {"8 B": 7.5, "floor": 4.0, "1 MiB": 80.0, "memcpy 1 MiB": 27.0}
    assert doctor.judge(quiet) == ("ok", "")
    busy = dict(quiet, **{"8 B": 97.6})  # 94 us above torch's dispatch: waiting for a core
    status, todo = doctor.judge(busy)
    assert status == "warn" and "above torch's own dispatch" in todo and "CPU binding" in todo, todo
    status, todo = doctor.judge(dict(quiet, **{"1 MiB": 900.0}))
    assert status == "warn" and "33x one memcpy" in todo, todo


def test_a_small_dev_shm_fails_with_what_to_do():
    rows = doctor.shared_memory(4, environ={"SCALECOMM_SHM_RING_BYTES": "64M"})
    if rows[0].status == "ok":  # this machine's /dev/shm holds 4 x 4 x 64 MiB: provoke it in a namespace
        if shutil.which("unshare") is None or os.geteuid() != 0:
            pytest.skip("needs root and unshare for a small /dev/shm")
        script = "mount -t tmpfs -o size=1m tmpfs /dev/shm && exec " + " ".join(
            [sys.executable, "-m", "pyscalecomm", "doctor", "--quick", "--nproc", "2"]
        )
        out = subprocess.run(
            ["unshare", "-m", "sh", "-c", script], env=ENV, capture_output=True, text=True, timeout=120
        )
        if "mount" in out.stderr and out.returncode != 0 and "shared memory" not in out.stdout:
            pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
        assert "[FAIL] shared memory: /dev/shm: 1 MiB" in out.stdout, out.stdout + out.stderr
        assert "docker run --shm-size" in out.stdout and out.returncode == 1
    else:
        assert rows[0].status in ("FAIL", "warn") and "SCALECOMM_SHM_RING_BYTES" in rows[0].todo


def test_one_core_for_many_ranks_is_warned():
    rows = doctor.cores(4, affinity={0})
    if (os.cpu_count() or 1) > 1:
        assert rows[0].status == "warn" and "--bind-to none" in rows[0].todo, rows
    assert any(r.name == "ranks per core" and r.status == "warn" for r in rows), rows
    assert all(r.status == "ok" for r in doctor.cores(1, affinity={0, 1}))


@pytest.mark.skipif(
    (os.cpu_count() or 1) < 2 or shutil.which("taskset") is None, reason="needs 2 cores, taskset"
)
def test_a_launch_bound_to_one_core_is_seen():
    out = _doctor("--quick", "--nproc", "2", prefix=("taskset", "-c", "0"))
    assert "[warn] CPU binding:" in out.stdout and "bound to one core" in out.stdout, out.stdout


def test_a_typo_in_a_variable_gets_the_closest_name():
    rows = doctor.settings({"SCALECOMM_SEGMNT_BYTES": "1M", "SCALECOMM_ALGO": "ring"})
    (typo,) = [r for r in rows if r.status == "warn"]
    assert typo.name == "SCALECOMM_SEGMNT_BYTES" and "SCALECOMM_SEGMENT_BYTES" in typo.todo
    (algo,) = [r for r in rows if r.name == "SCALECOMM_ALGO"]
    assert algo.found == "ring (environment; default auto)"


def test_a_missing_interface_and_an_unroutable_master_fail():
    (_, iface) = doctor.network({"SCALECOMM_SOCKET_IFNAME": "nosuch0"})
    assert iface.status == "FAIL" and "no such interface" in iface.found and "set it to one of" in iface.todo
    (_, route) = doctor.network({"MASTER_ADDR": "no-such-host.invalid"})
    assert route.status == "FAIL" and "MASTER_ADDR" in route.todo


def test_ptrace_scope_is_read(tmp_path):
    f = tmp_path / "scope"
    f.write_text("2\n")
    (row,) = doctor.ptrace_scope(str(f))
    assert row.found.startswith("2: processes cannot read each other's memory")
    f.write_text("0\n")
    assert "single copy" in doctor.ptrace_scope(str(f))[0].found


def test_another_torch_release_is_named_at_import():
    with pytest.raises(ImportError, match="built for torch 2.13.0, but this is torch 2.14.1.*pip install"):
        pyscalecomm._check_torch("2.13.0", "2.14.1+cu130")
    pyscalecomm._check_torch("2.14.1", "2.14.1+cu130")  # the same release, another build tag
    pyscalecomm._check_torch("unknown", "2.14.1")
