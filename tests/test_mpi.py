"""MPI: launch under mpirun with no rendezvous variables, the mpi transport, the
mpi passthrough algorithm, their errors, and Slurm-style launch variables."""

import os
import shutil
import subprocess
import sys

import pytest
from dist_helpers import free_port, mpirun, run_ranks

import pyscalecomm
from pyscalecomm import launch

HERE = os.path.dirname(os.path.abspath(__file__))
needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or not pyscalecomm.built_with_mpi(),
    reason="needs mpirun and a build with MPI (apt-get install openmpi-bin libopenmpi-dev)",
)


def _mpirun(n, case, env=None, timeout=180):
    return mpirun(n, [os.path.join(HERE, "mpi", "mpirun_worker.py"), case], env, timeout)


@needs_mpi
@pytest.mark.parametrize("zero_copy", ["1", "0"])
@pytest.mark.parametrize("n", [2, 3])
def test_mpirun_schedules_over_mpi_transport(n, zero_copy):
    # 100-byte MPI messages: on the links, wire headers and elements straddle
    # message boundaries; with zero copy, collectives bypass the links.
    out = _mpirun(
        n,
        "transport",
        {
            "SCALECOMM_TRANSPORT": "mpi",
            "SCALECOMM_MPI_CHUNK_BYTES": "100",
            "SCALECOMM_DEBUG": "INFO",
            "SCALECOMM_ALGO": "ring",
            "SCALECOMM_MPI_ZERO_COPY": zero_copy,
        },
    )
    assert "via mpi" in out and "via shm" not in out
    assert ("(mpi channel)" in out) == (zero_copy == "1"), out[-3000:]


@needs_mpi
def test_mpirun_zero_copy_mismatched_counts_fail_every_rank_and_write_nothing():
    _mpirun(2, "mismatch", {"SCALECOMM_TRANSPORT": "mpi", "SCALECOMM_ALGO": "ring"}, timeout=120)


@needs_mpi
def test_mpirun_zero_copy_times_out_naming_the_missing_rank_and_exits():
    _mpirun(2, "channel_timeout", {"SCALECOMM_TRANSPORT": "mpi", "SCALECOMM_ALGO": "ring"}, timeout=120)


@needs_mpi
def test_mpirun_zero_copy_needs_every_pair_on_mpi():
    # Emulated hosts (0, 1 | 2, 3): shm inside, mpi between, so groups of all
    # four keep collectives on the links; the subgroup [0, 3] is all mpi.
    out = _mpirun(4, "hosts", {"SCALECOMM_DEBUG": "INFO"})
    assert out.count("collectives move straight") == 2, out[-3000:]  # the subgroup's two ranks only


@needs_mpi
def test_mpirun_default_transport_is_shm_on_one_host_with_rhd():
    out = _mpirun(2, "transport", {"SCALECOMM_DEBUG": "INFO", "SCALECOMM_ALGO": "rhd"})
    assert "via shm" in out and "MPI communicator over the group" in out


@needs_mpi
def test_mpirun_two_emulated_hosts_use_shm_inside_and_mpi_between():
    out = _mpirun(4, "hosts", {"SCALECOMM_DEBUG": "INFO"})
    assert "rank 0: peer rank 1 via shm" in out and "rank 0: peer rank 2 via mpi" in out, out[-3000:]
    assert "rank 3: peer rank 2 via shm" in out and "rank 3: peer rank 1 via mpi" in out


@needs_mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_mpirun_mpi_passthrough_algorithm(n):
    _mpirun(n, "passthrough", {"SCALECOMM_ALGO": "mpi"})


@needs_mpi
def test_mpirun_passthrough_times_out_when_a_rank_is_missing():
    _mpirun(2, "timeout", {"SCALECOMM_ALGO": "mpi"}, timeout=120)


@needs_mpi
def test_an_abandoned_mpi_request_never_writes_into_freed_memory():
    _mpirun(2, "late", {"SCALECOMM_ALGO": "mpi"}, timeout=120)


@needs_mpi
def test_torchfts_group_over_mpi_links_releases_its_waiters_on_abort_and_reconfigures():
    # What torchft relies on, over the mpi transport: abort() from another thread
    # releases the ranks waiting on an absent one (not at the 30 s timeout), and the
    # same objects configured under a new store prefix reduce at once.
    pytest.importorskip("torchft", reason="torchft is optional: pip install .[torchft]")
    out = _mpirun(3, "torchft_abort", timeout=120)
    assert out.count("after abort()") == 2, out[-3000:]


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_an_abort_reaches_peers_over_the_mpi_transport_at_once(n):
    _mpirun(n, "abort", {"SCALECOMM_TRANSPORT": "mpi", "SCALECOMM_ALGO": "ring"}, timeout=120)


@needs_mpi
def test_a_receive_from_any_source_over_mpi_stops_waiting_on_peers_that_left():
    _mpirun(3, "leave", {"SCALECOMM_TRANSPORT": "mpi"}, timeout=120)


def _try_mpi_algorithm(rank, n):
    return "unreachable"


def test_mpi_algorithm_without_mpirun_says_what_to_do():
    results = run_ranks(2, _try_mpi_algorithm, env={"SCALECOMM_ALGO": "mpi"}, expect_errors=True)
    for res in results:
        assert "mpirun" in res.text and "algorithm mpi" in res.text, res


def test_mpi_transport_without_mpirun_says_what_to_do():
    results = run_ranks(2, _try_mpi_algorithm, env={"SCALECOMM_TRANSPORT": "mpi"}, expect_errors=True)
    for res in results:
        assert "transport mpi" in res.text and "mpirun" in res.text, res


def test_first_slurm_host():
    assert launch.first_slurm_host("gpu[07-09,12],cpu1") == "gpu07"
    assert launch.first_slurm_host("node1,node2") == "node1"
    assert launch.first_slurm_host("a-b[001-004]") == "a-b001"


def test_env_from_launcher_keeps_torchrun_and_user_values(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(k, "")  # records the original state, so what the launcher code sets is undone
        monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[4-5]")
    monkeypatch.setenv("SLURM_JOB_ID", "123456")
    monkeypatch.setenv("MASTER_PORT", "31000")
    assert launch.env_from_launcher() == "slurm"
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("3", "8", "1")
    assert os.environ["MASTER_ADDR"] == "n4" and os.environ["MASTER_PORT"] == "31000"
    monkeypatch.setenv("SLURM_PROCID", "5")
    assert launch.env_from_launcher() == "torchrun" and os.environ["RANK"] == "3"


def test_ranks_sharing_a_gpu_get_their_own_nccl_host_and_keep_a_clusters_settings():
    # NCCL refuses two ranks of one host on one GPU; distinct host ids make it join them over sockets.
    envs = [{}, {}]
    for r, env in enumerate(envs):
        launch.share_gpu_env(r, env)
    assert envs[0]["NCCL_HOSTID"] != envs[1]["NCCL_HOSTID"]
    assert envs[0]["NCCL_SOCKET_IFNAME"] == envs[1]["NCCL_SOCKET_IFNAME"] == "lo"
    cluster = {"NCCL_HOSTID": "emu1gbit-host1", "NCCL_SOCKET_IFNAME": "eth0"}
    launch.share_gpu_env(0, cluster)
    assert cluster == {"NCCL_HOSTID": "emu1gbit-host1", "NCCL_SOCKET_IFNAME": "eth0"}


def test_every_launcher_we_start_gives_its_ranks_torchruns_variables(tmp_path):
    env = launch.rank_env(3, 4, "10.0.0.1", 29999, local_world=2, base={"OMP_NUM_THREADS": "4", "X": "y"})
    assert env == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29999",
        "OMP_NUM_THREADS": "4",  # the caller's, kept
        "X": "y",
    }
    assert launch.rank_env(0, 2, "h", 1, base={})["OMP_NUM_THREADS"] == "1"
    # run_local: each rank sees its own variables; a failing rank is the job's status
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    show = f"import os; e = os.environ; open({str(tmp_path)!r} + '/ranks' + e['RANK'], 'w').write("
    command = [sys.executable, "-c", show + f"' '.join(e[k] for k in {keys!r}))"]
    assert launch.run_local(command, 3, 60, "test", {"OMP_NUM_THREADS": "2"}) == 0
    assert [(tmp_path / f"ranks{r}").read_text().split() for r in range(3)] == [
        [str(r), "3", str(r), "3"] for r in range(3)
    ]
    failing = [sys.executable, "-c", "import os, sys; sys.exit(int(os.environ['RANK']) * 3)"]
    assert launch.run_local(failing, 2, 60, "test") == 3


# No `import pyscalecomm`: the installed entry point registers the backend
# when torch is imported, and its env:// rendezvous reads mpirun's variables.
_NO_IMPORT_SCRIPT = """
import sys, torch, torch.distributed as dist
dist.init_process_group("scalecomm")
x = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
assert x.item() == 3.0, x
assert "pyscalecomm" in sys.modules  # loaded by the first group, not by the script
print("OK rank", dist.get_rank())
dist.destroy_process_group()
"""


@needs_mpi
def test_mpirun_needs_neither_variables_nor_an_import():
    from importlib.metadata import entry_points

    if not any(e.name == "scalecomm" for e in entry_points(group="torch.backends")):
        pytest.fail("the torch.backends entry point is not installed: pip install --no-build-isolation -e .")
    mpirun(2, ["-c", _NO_IMPORT_SCRIPT], env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})


_SLURM_SCRIPT = """
import torch, torch.distributed as dist
import pyscalecomm  # fills RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from SLURM_*
dist.init_process_group("scalecomm")
x = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
print("RESULT", dist.get_rank(), float(x))
dist.destroy_process_group()
"""


def test_slurm_variables_alone_rendezvous():
    port = free_port()
    while not 20000 <= port < 40000:
        port = free_port()
    procs = []
    for rank in range(2):
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
        }
        env.update(
            SLURM_PROCID=str(rank),
            SLURM_NTASKS="2",
            SLURM_LOCALID=str(rank),
            SLURM_JOB_NODELIST="localhost",
            SLURM_JOB_ID=str(port - 20000),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _SLURM_SCRIPT],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for rank, out in enumerate(outs):
        assert f"RESULT {rank} 3.0" in out, out[-3000:]
