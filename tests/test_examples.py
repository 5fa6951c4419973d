"""The examples README points to run as written: under torchrun, and under
mpirun where Open MPI and mpi4py are present."""

import os
import shutil
import subprocess
import sys

import pytest
from dist_helpers import free_port
from test_registration import _installed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": PATH}


def _torchrun(script):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--master-port", str(free_port()), os.path.join(ROOT, "examples", script)]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=180)


def test_the_array_example_runs_under_torchrun():
    out = _torchrun("allreduce_arrays.py")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 ranks: sum [3.0, 3.0, 3.0, 3.0], max rank 1" in out.stdout, out.stdout


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
def test_the_array_example_runs_under_mpirun():
    pytest.importorskip("mpi4py")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable]
    cmd += [os.path.join(ROOT, "examples", "allreduce_arrays.py")]
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 ranks: sum [3.0, 3.0, 3.0, 3.0]" in out.stdout, out.stdout


@pytest.mark.skipif(not _installed(), reason="scalecomm is not installed (pip install -e .): no entry point")
def test_the_ddp_example_runs_under_torchrun_without_the_import():
    out = _torchrun("ddp_train.py")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 ranks, backend scalecomm: final loss" in out.stdout, out.stdout
