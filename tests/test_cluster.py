"""The emulated cluster (python -m pyscalecomm.cluster): namespaces, links, teardown.

Needs root and iproute2; skipped otherwise. Bandwidth is measured by the
benchmark (docs/performance.md), not asserted here.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _can_make_namespaces() -> bool:
    """Root alone is not enough in some containers: try to create one namespace."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        return False
    name = f"scprobe{os.getpid()}"
    ok = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ok


needs_root = pytest.mark.skipif(
    not _can_make_namespaces(), reason="needs root with CAP_NET_ADMIN and iproute2 (ip, tc)"
)

RANK_SCRIPT = """
import os, torch, torch.distributed as dist, pyscalecomm
dist.init_process_group("scalecomm")
t = torch.full((1 << 18,), float(dist.get_rank() + 1))
dist.all_reduce(t)
n = dist.get_world_size()
assert torch.equal(t, torch.full_like(t, n * (n + 1) / 2)), t[:4]
print("rank", dist.get_rank(), "host", os.environ["SCALECOMM_HOSTNAME"], "ok", flush=True)
print("rank", dist.get_rank(), "nccl", os.environ.get("NCCL_HOSTID"), os.environ.get("NCCL_SOCKET_IFNAME"))
dist.destroy_process_group()
"""


def _namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.strip()]


def _cluster(tmp_path, *args, command=None, timeout=240):
    """Runs the cluster with `args`; each rank runs `command` (default: RANK_SCRIPT)."""
    if command is None:
        script = tmp_path / "rank.py"
        script.write_text(RANK_SCRIPT)
        command = [sys.executable, str(script)]
    env = dict(os.environ, PYTHONPATH=ROOT, SCALECOMM_DEBUG="INFO")
    cmd = [sys.executable, "-m", "pyscalecomm.cluster", "--id", "42", "--logdir", str(tmp_path), *args]
    return subprocess.run([*cmd, "--", *command], capture_output=True, text=True, timeout=timeout, env=env)


@needs_root
def test_two_hosts_of_two_ranks_share_memory_inside_and_tcp_between(tmp_path):
    res = _cluster(tmp_path, "--hosts", "2", "--ranks-per-host", "2", "--rate", "500mbit")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert "rank 0 host emu500mbit-host0 ok" in res.stdout, res.stdout
    log1 = (tmp_path / "cluster-rank1.log").read_text()
    assert "rank 1 host emu500mbit-host0 ok" in log1
    assert (
        "peer rank 0 via shm" in log1 and "peer rank 2 via tcp" in log1 and "peer rank 3 via tcp" in log1
    ), log1
    assert "rank 3 host emu500mbit-host1 ok" in (tmp_path / "cluster-rank3.log").read_text()
    # NCCL tells the hosts apart and talks over the capped links (ranks sharing a GPU too)
    assert "rank 0 nccl emu500mbit-host0 eth0" in res.stdout
    assert "rank 3 nccl emu500mbit-host1 eth0" in (tmp_path / "cluster-rank3.log").read_text()
    assert not [ns for ns in _namespaces() if ns.startswith("sc42")], "namespaces left behind"


MPI_RANK_SCRIPT = """
import os, socket, sys, torch, torch.distributed as dist, pyscalecomm
from mpi4py import MPI
dist.init_process_group("scalecomm")  # the rendezvous comes from mpirun's variables
r, n = dist.get_rank(), dist.get_world_size()
assert r == MPI.COMM_WORLD.rank and n == MPI.COMM_WORLD.size == 4
t = torch.full((1 << 16,), float(r + 1))
dist.all_reduce(t)
a = t.numpy().copy()
MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, a)
assert t[0] == n * (n + 1) / 2 and a[0] == n * t[0], (t[0], a[0])
window = dist.group.WORLD._get_backend(torch.device("cpu")).config.shm_window_bytes
assert window == 131072, window  # SCALECOMM_* variables reach every host's ranks
host = os.environ["SCALECOMM_HOSTNAME"]
assert os.environ["NCCL_HOSTID"] == host and os.environ["NCCL_SOCKET_IFNAME"] == "eth0"
line = f"rank {r} node {socket.gethostname()} host {host} ok"
with open(os.path.join(sys.argv[1], f"rank{r}.txt"), "w") as f:  # mpirun interleaves the ranks' stdout
    f.write(line)
dist.destroy_process_group()
"""


@needs_root
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_mpirun_job_spans_the_hosts_with_scalecomm_over_mpi_between_them(tmp_path, monkeypatch):
    # Shared memory inside a host and MPI's tcp transport between hosts: a
    # rank waiting on its shm peer must still move its MPI sends (they hung).
    pytest.importorskip("mpi4py")
    script = tmp_path / "rank.py"
    script.write_text(MPI_RANK_SCRIPT)
    monkeypatch.setenv("SCALECOMM_SHM_WINDOW_BYTES", "131072")
    res = _cluster(
        tmp_path,
        *("--hosts", "2", "--ranks-per-host", "2", "--rate", "1gbit", "--timeout", "120", "--mpirun"),
        command=[sys.executable, str(script), str(tmp_path)],
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    for r in range(4):  # Open MPI sees two nodes; scalecomm two hosts, shm inside, mpi between
        line = (tmp_path / f"rank{r}.txt").read_text()
        assert line == f"rank {r} node emu1gbit-host{r // 2} host emu1gbit-host{r // 2} ok", line
    assert "rank 0: peer rank 1 via shm" in out and "rank 0: peer rank 2 via mpi" in out, out[-3000:]
    assert not [ns for ns in _namespaces() if ns.startswith("sc42")], "namespaces left behind"


CACHE_SCRIPT = """
import torch, torch.distributed as dist, pyscalecomm
dist.init_process_group("scalecomm", pg_options=pyscalecomm.Options(algorithm="auto"))
if dist.get_rank() == 0:
    print("cache", dist.group.WORLD._get_backend(torch.device("cpu")).tuning_file, flush=True)
dist.destroy_process_group()
"""


def test_hosts_are_named_by_their_links_rate_not_by_the_cluster_id():
    from pyscalecomm.cluster import Cluster

    assert Cluster(2, "1gbit", cluster_id=0).host_name(1) == "emu1gbit-host1"
    assert Cluster(2, "1Gbps", cluster_id=7).host_name(1) == "emu1gbit-host1"
    assert Cluster(2, "125MB/s", cluster_id=3).host_name(0) == "emu1gbit-host0"
    assert Cluster(2, "2.5gbit").host_name(0) == "emu2p5gbit-host0"
    assert Cluster(2, "500mbit").host_name(0) == "emu500mbit-host0"
    assert Cluster(2, None).host_name(0) == "emu-host0"


@needs_root
def test_clusters_of_one_rate_share_a_tuning_cache_and_other_rates_do_not(tmp_path, monkeypatch):
    # auto's cache is per machine: a file measured under one cluster (python -m
    # pyscalecomm.tune) must serve the training driver's cluster of that rate.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SCALECOMM_TUNING_FILE", raising=False)
    script = tmp_path / "rank.py"
    script.write_text(CACHE_SCRIPT)
    paths = []
    for cluster_id, rate in (("42", "500mbit"), ("43", "500mbit"), ("42", "1gbit")):
        cmd = [sys.executable, "-m", "pyscalecomm.cluster", "--id", cluster_id, "--logdir", str(tmp_path)]
        cmd += ["--hosts", "2", "--rate", rate, "--", sys.executable, str(script)]
        env = dict(os.environ, PYTHONPATH=ROOT)
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        paths += re.findall(r"^cache (\S+)$", res.stdout, re.M)
    assert len(paths) == 3 and all(p.startswith(str(tmp_path / "cache")) for p in paths), paths
    assert paths[0] == paths[1] != paths[2], paths


@needs_root
def test_a_second_job_on_a_cluster_id_in_use_is_refused_and_leaves_the_first_alone(tmp_path):
    # The first job's hosts live while its command runs (6 s); a second job
    # on the same id must not delete them (its namespaces' names are the same).
    import time

    env = dict(os.environ, PYTHONPATH=ROOT)
    base = [sys.executable, "-m", "pyscalecomm.cluster", "--id", "43", "--hosts", "1"]
    first = subprocess.Popen([*base, "--logdir", str(tmp_path), "--", "sleep", "6"], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "sc43h0" not in _namespaces() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "sc43h0" in _namespaces(), "the first cluster never came up"
        second = subprocess.run([*base, "--", "true"], capture_output=True, text=True, timeout=60, env=env)
        assert second.returncode != 0, second.stdout
        assert "cluster id 43" in second.stderr and "in use by a running job" in second.stderr, second.stderr
        assert f"pid {first.pid}" in second.stderr, second.stderr
        assert "sc43h0" in _namespaces()  # the first job's host is still there
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert not [ns for ns in _namespaces() if ns.startswith("sc43")]


@needs_root
def test_the_drivers_clusters_take_the_first_free_id():
    from pyscalecomm.cluster import free_cluster

    with free_cluster(1, None, 44) as a, free_cluster(1, None, 44) as b:
        assert (a.prefix, b.prefix) == ("sc44", "sc45")
        assert {"sc44h0", "sc45h0"} <= set(_namespaces())
    assert not [ns for ns in _namespaces() if ns.startswith(("sc44", "sc45"))]


@needs_root
def test_failing_rank_fails_the_run_and_still_tears_down(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text("import os, sys; sys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    res = _cluster(tmp_path, "--hosts", "2", command=[sys.executable, str(script)], timeout=120)
    assert res.returncode == 3, res.stderr
    assert not [ns for ns in _namespaces() if ns.startswith("sc42")]


def test_without_root_it_says_so_and_changes_nothing(tmp_path):
    if shutil.which("setpriv") is None and os.geteuid() == 0:
        pytest.skip("needs setpriv to drop root")
    # run the file itself: as an unprivileged user torch (under /root) may be unreadable,
    # and the harness needs only the standard library
    cmd = [sys.executable, os.path.join(ROOT, "pyscalecomm", "cluster.py"), "--hosts", "2", "--", "true"]
    if os.geteuid() == 0:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    res = subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT)
    )
    if os.geteuid() == 0 and "needs root" not in res.stdout and "Permission denied" in res.stderr:
        pytest.skip("this Python is not usable by an unprivileged user")
    assert res.returncode == 2 and "needs root" in res.stdout, res.stdout + res.stderr


@needs_root
def test_queue_ms_sets_the_links_queue(tmp_path):
    tc = ["tc", "qdisc", "show", "dev", "eth0"]
    args = ["--hosts", "1", "--rate", "1gbit", "--queue-ms", "5", "--burst", "1048576"]
    res = _cluster(tmp_path, *args, command=tc, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "tbf" in res.stdout and "rate 1Gbit" in res.stdout and "lat 5ms" in res.stdout, res.stdout
    burst = re.search(r"burst (\d+)b", res.stdout)  # tc stores the bucket in timer ticks: a few bytes off
    assert burst and abs(int(burst.group(1)) - 1048576) < 1024, res.stdout


@pytest.mark.parametrize(
    "arg, said",
    [
        (["--queue-ms", "0"], "--queue-ms must lie in 0.1..10000"),
        (["--burst", "1500"], "--burst must lie in 65536"),
    ],
)
def test_bad_link_settings_are_refused_before_anything_runs(arg, said):
    cmd = [sys.executable, os.path.join(ROOT, "pyscalecomm", "cluster.py"), *arg, "--", "true"]
    res = subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT)
    )
    assert res.returncode == 2 and said in res.stderr, res.stderr


@needs_root
def test_a_terminated_training_run_leaves_no_namespaces(tmp_path):
    # The driver's cluster (id 7) under SIGTERM, as `timeout` or a scheduler sends it.
    import signal
    import time

    cmd = [sys.executable, "-m", "pyscalecomm.train", "--cluster-rate", "1gbit", "--out-dir", str(tmp_path)]
    cmd += ["--sweep", "world=2", "--epochs", "50", "--no-plots"]
    proc = subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not [ns for ns in _namespaces() if ns.startswith("sc7h")] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [ns for ns in _namespaces() if ns.startswith("sc7h")], "the cluster never came up"
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert not [ns for ns in _namespaces() if ns.startswith("sc7")]


CPU_SCRIPT = """
import os, time
start, cpu = time.monotonic(), time.process_time()
while time.monotonic() - start < 1.5:  # bounded: 1.5 s of wall time, busy
    pass
share = (time.process_time() - cpu) / (time.monotonic() - start)
print("share", os.environ["SCALECOMM_HOSTNAME"], round(share, 3), flush=True)
"""


def _has_cpu_controller() -> bool:
    if os.path.exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        return True
    controllers = "/sys/fs/cgroup/cgroup.controllers"
    return os.path.exists(controllers) and "cpu" in open(controllers).read().split()


@needs_root
@pytest.mark.skipif(not _has_cpu_controller(), reason="needs the cgroup cpu controller")
def test_each_host_computes_at_its_cpu_share_and_a_straggler_at_its_own(tmp_path):
    script = tmp_path / "cpu.py"
    script.write_text(CPU_SCRIPT)
    args = ["--hosts", "2", "--cpus-per-host", "0.3", "--host-cpus", "1:0.15"]
    r = _cluster(tmp_path, *args, command=[sys.executable, str(script)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CPU shares: host 0 0.3 cores, host 1 0.15 cores" in r.stdout
    share = re.compile(r"share emu-host(\d) ([\d.]+)")
    outputs = [r.stdout, (tmp_path / "cluster-rank1.log").read_text()]
    seen = dict(share.search(out).groups() for out in outputs)
    # Each busy rank alone would take a whole core (the machine has two).
    assert 0.2 <= float(seen["0"]) <= 0.36, seen
    assert 0.08 <= float(seen["1"]) <= 0.2, seen
    for root in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup"):
        if os.path.isdir(root):
            left = [d for d in os.listdir(root) if d.startswith("scalecomm-sc42")]
            assert not left, f"cgroups left behind: {left}"


def test_cpu_shares_are_parsed_and_refused_by_name():
    from pyscalecomm.cluster import host_cpus

    assert host_cpus(4, 0.4, "3:0.2") == {0: 0.4, 1: 0.4, 2: 0.4, 3: 0.2}
    assert host_cpus(2, None, "1:0.5") == {1: 0.5}
    assert host_cpus(2, None, "") == {}
    for per_host, overrides, message in [
        (None, "2:0.1", "a host in 0..1"),
        (None, "x", "give host:cores"),
        (None, "1:fast", "a number of cores"),
        (0.001, "", "0.01..1024"),
    ]:
        with pytest.raises(ValueError, match=message):
            host_cpus(2, per_host, overrides)


AUTO_SCRIPT = """
import json, os, sys, torch, torch.distributed as dist, pyscalecomm
dist.init_process_group("scalecomm")
torch.manual_seed(dist.get_rank())
direction = torch.randn(1 << 20, generator=torch.Generator().manual_seed(0))
for _ in range(80):  # sparsifiers wait for the key's 64th call; a gradient keeps its direction
    pyscalecomm.allreduce(direction + 0.3 * torch.randn(1 << 20), "auto", key="grad")
(c,) = pyscalecomm.compress.choices()
with open(os.path.join(sys.argv[1], f"auto{dist.get_rank()}.json"), "w") as f:
    json.dump(c, f)
dist.destroy_process_group()
"""


@needs_root
def test_auto_compresses_on_a_slow_link_with_the_same_choice_on_every_host(tmp_path):
    # 4 MiB over 100 Mbit/s: the dense sum takes ~0.35 s, bf16 half that (the
    # warm-up's choice), top-k 10 % 65-70 ms (its values and indices are a
    # fifth of the dense bytes; on this gradient the accuracy guard leaves
    # top-k 3 % and 1 % out before they run);
    # on one host's shared memory the same tensor stays uncompressed
    # (tests/test_compress_auto.py).
    script = tmp_path / "auto.py"
    script.write_text(AUTO_SCRIPT)
    command = [sys.executable, str(script), str(tmp_path)]
    res = _cluster(tmp_path, "--hosts", "2", "--rate", "100mbit", command=command)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    chosen = [json.loads((tmp_path / f"auto{r}.json").read_text()) for r in range(2)]
    assert chosen[0] == chosen[1]
    assert chosen[0]["choice"].startswith("topk"), chosen[0]
    assert chosen[0]["predicted_s"][chosen[0]["choice"]] < 0.3 * chosen[0]["predicted_s"]["none"], chosen[0]
