"""An emulated cluster on one machine: hosts as network namespaces on rate-limited links.

    sudo python -m pyscalecomm.cluster --hosts 4 --rate 1gbit -- \\
        python -m pyscalecomm.bench -b 1M -e 64M --baselines gloo

Creates one network namespace per host (``sc<id>h<i>``), joins them with a
bridge in a namespace of its own (``sc<id>br``: nothing touches the machine's
real interfaces), gives host i the address 10.<net>.0.<i+1>, and caps each
host's link with ``tc ... tbf`` in both directions (egress in the host's
namespace, and egress of the bridge port towards it), so each host has
``--rate`` each way, as a NIC would (``--burst``: the bytes a link passes
above its rate after an idle spell, the tbf bucket; ``--queue-ms``: how long
a packet may wait in its queue). Then it runs the command once per rank,
inside its host's namespace, with the env:// rendezvous variables (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR = host 0, MASTER_PORT) and
SCALECOMM_HOSTNAME and NCCL_HOSTID set per host (``emu<rate>-host<i>``,
e.g. ``emu1gbit-host0``), so ranks on one host share memory and ranks on
different hosts talk TCP through the capped links (NCCL through its socket
transport on ``eth0``, also where the hosts' ranks share one GPU). Host names carry the
rate, not the cluster id: auto's tuning cache is per machine, so a file
measured on one cluster (say ``python -m pyscalecomm.tune`` under it) serves
every later cluster of the same rate and shape, the training driver's
``--cluster-rate`` included. Rank 0 prints to the terminal; the others write
``cluster-rank<r>.log`` in ``--logdir``.

With ``--mpirun`` the command runs as one Open MPI job instead: mpirun starts
in host 0 and reaches the other hosts through an rsh agent that enters their
namespaces, each host with its own hostname, so MPI's traffic between hosts
crosses the capped links (shared memory within a host). Every SCALECOMM_*
variable of the caller is forwarded to every rank:

    SCALECOMM_TRANSPORT=mpi python -m pyscalecomm.cluster --hosts 2 --rate 10gbit --mpirun -- \\
        python bench/small_latency.py --sizes 1M,16M --algos ring

``--cpus-per-host 0.4`` gives every host a CPU share of its own: its ranks
run in a cgroup of the cpu controller whose quota is 0.4 of a core per
100 ms period (``--host-cpus 3:0.2`` gives host 3 another share, a
straggler), so N hosts compute at a known, equal speed on a machine with
fewer cores than ranks, and communication cannot borrow a neighbour's
core. cgroup v1 (``/sys/fs/cgroup/cpu``) and v2 (``cpu.max``) both work.

Everything is torn down on exit, on failure and on Ctrl-C (namespaces and the
veth pairs in them, the hosts' cgroups); stale namespaces of an earlier killed run with the same
``--id`` are removed first. An id belongs to one running job (a lock file
in /run/lock, released when the job ends however it ends): a second job on
the same ``--id`` is refused before it touches anything, naming the first;
the training driver's ``--cluster-rate`` takes the first free id from 7, so
two of its jobs at once each get their own hosts. Needs root (CAP_NET_ADMIN): without it, it says so
and exits with status 2, touching nothing. All traffic stays inside the
namespaces it created. The command is bounded by ``--timeout``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import threading

if __package__:
    from pyscalecomm._cli import HelpFormatter, add_version
    from pyscalecomm.units import parse_rate, rate_text, tc_rate
else:  # run as a file (an unprivileged user may not read torch): its siblings, standard library only
    from _cli import HelpFormatter, add_version
    from units import parse_rate, rate_text, tc_rate


def _interrupted(signum, frame):  # SIGTERM: the same clean teardown as Ctrl-C
    raise KeyboardInterrupt


LOCK_DIR = "/run/lock" if os.path.isdir("/run/lock") else "/tmp"


class ClusterBusy(RuntimeError):
    """Another running job holds this cluster id."""


class Cluster:
    """The namespaces, bridge and links of one emulated cluster (a context manager)."""

    def __init__(
        self,
        hosts: int,
        rate: str | None,
        cluster_id: int = 0,
        net: int = 77,
        queue_ms: float = 100,
        burst: int | None = None,
        cpus: dict[int, float] | None = None,
    ) -> None:
        self.hosts = hosts
        self.rate = rate  # as given (1gbit, 10Gbps, 1.25GB/s: pyscalecomm.units)
        self.bytes_per_s = parse_rate(rate) if rate else None
        self.queue_ms = queue_ms
        self.burst = burst
        self.prefix = f"sc{cluster_id}"
        self.bridge_ns = f"{self.prefix}br"
        self.net = net
        self.created: list[str] = []
        self.cpus = dict(cpus or {})  # host -> cores of CPU time per period
        self.cgroups: dict[int, str] = {}  # host -> its cgroup directory
        self.runs = 0
        self.cluster_id = cluster_id
        self._lock: int | None = None  # the id's lock file, held while the cluster lives

    def host_ns(self, i: int) -> str:
        return f"{self.prefix}h{i}"

    def host_name(self, i: int) -> str:
        """Host i's name (SCALECOMM_HOSTNAME, and its hostname under --mpirun):
        the links' rate, not the cluster id, so that what a run measures per
        machine (auto's tuning cache) applies to every later cluster of the
        same rate and shape, and not to one at another rate."""
        if not self.bytes_per_s:
            return f"emu-host{i}"
        bits = self.bytes_per_s * 8
        rate = f"{bits / 1e9:g}gbit" if bits >= 1e9 else f"{bits / 1e6:g}mbit"
        return f"emu{rate.replace('.', 'p')}-host{i}"

    def address(self, i: int) -> str:
        return f"10.{self.net}.0.{i + 1}"

    def _ip(self, *args: str, ns: str | None = None) -> None:
        cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=20)

    def _tbf(self, dev: str, ns: str) -> None:
        if not self.rate:
            return
        burst = self.burst or max(64 * 1024, int(self.bytes_per_s / 250))
        rate = tc_rate(self.bytes_per_s)
        self._ip("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", str(burst),
                 "latency", f"{self.queue_ms:g}ms", ns=ns)  # fmt: skip

    def _cgroup_root(self) -> tuple[str, bool]:
        """The cpu controller's directory and whether it is cgroup v2."""
        v1 = "/sys/fs/cgroup/cpu"
        if os.path.exists(os.path.join(v1, "cpu.cfs_quota_us")):
            return v1, False
        v2 = "/sys/fs/cgroup"
        controllers = os.path.join(v2, "cgroup.controllers")
        if os.path.exists(controllers) and "cpu" in open(controllers).read().split():
            with open(os.path.join(v2, "cgroup.subtree_control"), "w") as f:
                f.write("+cpu")
            return v2, True
        raise RuntimeError(
            "--cpus-per-host needs the cgroup cpu controller (/sys/fs/cgroup/cpu, or cgroup v2 with cpu.max)"
        )

    def _limit_cpus(self) -> None:
        """A cgroup per host with a CPU share (the hosts in self.cpus)."""
        if not self.cpus:
            return
        root, v2 = self._cgroup_root()
        period = 100_000  # us
        for host, cores in sorted(self.cpus.items()):
            path = os.path.join(root, f"scalecomm-{self.host_ns(host)}")
            if os.path.isdir(path):
                os.rmdir(path)  # a stale one of an earlier killed run (empty: its processes are gone)
            os.mkdir(path)
            self.cgroups[host] = path
            quota = max(1000, int(cores * period))
            if v2:
                with open(os.path.join(path, "cpu.max"), "w") as f:
                    f.write(f"{quota} {period}")
            else:
                with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
                    f.write(str(period))
                with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
                    f.write(str(quota))

    def _join(self, host: int):
        """A preexec_fn that moves the starting rank into its host's cgroup, or None."""
        path = self.cgroups.get(host)
        if path is None:
            return None
        procs = os.path.join(path, "cgroup.procs")

        def join() -> None:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        return join

    def _take_id(self) -> None:
        """Holds the id's lock (released by the kernel when this process
        ends, however it ends); ClusterBusy where a live job holds it."""
        path = os.path.join(LOCK_DIR, f"scalecomm-cluster-{self.prefix}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ClusterBusy(
                f"cluster id {self.cluster_id} (namespaces {self.prefix}h0..) is in use by a running job "
                f"(pid {owner}); wait for it, or give this cluster another --id"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock = fd

    def remove_stale(self) -> None:
        """Deletes this id's namespaces left by a job that died (this one holds the id)."""
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=20).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.strip() else ""
            if name == self.bridge_ns or (
                name.startswith(self.prefix + "h") and name[len(self.prefix) + 1 :].isdigit()
            ):
                subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)

    def __enter__(self) -> Cluster:
        # A SIGTERM (timeout, a job scheduler) tears down like Ctrl-C instead
        # of leaving the namespaces behind (restored on exit; main thread only).
        self._old_term = None
        if threading.current_thread() is threading.main_thread():
            self._old_term = signal.signal(signal.SIGTERM, _interrupted)
        try:
            self._take_id()  # before anything is removed: a live job's namespaces are its own
        except BaseException:
            self._restore_term()
            raise
        self.remove_stale()
        try:
            self._ip("ip", "netns", "add", self.bridge_ns)
            self.created.append(self.bridge_ns)
            self._ip("ip", "link", "add", "br0", "type", "bridge", ns=self.bridge_ns)
            self._ip("ip", "link", "set", "br0", "up", ns=self.bridge_ns)
            for i in range(self.hosts):
                ns = self.host_ns(i)
                self._ip("ip", "netns", "add", ns)
                self.created.append(ns)
                self._ip("ip", "link", "set", "lo", "up", ns=ns)
                # veth pair: "eth0" in the host, "p<i>" on the bridge
                veth = ["ip", "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}"]
                self._ip(*veth, "netns", self.bridge_ns, ns=ns)
                self._ip("ip", "addr", "add", f"{self.address(i)}/16", "dev", "eth0", ns=ns)
                self._ip("ip", "link", "set", "eth0", "up", ns=ns)
                self._ip("ip", "link", "set", f"p{i}", "master", "br0", ns=self.bridge_ns)
                self._ip("ip", "link", "set", f"p{i}", "up", ns=self.bridge_ns)
                self._tbf("eth0", ns)  # host -> network
                self._tbf(f"p{i}", self.bridge_ns)  # network -> host
            self._limit_cpus()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        self.created.clear()
        for path in self.cgroups.values():
            try:
                os.rmdir(path)  # empty once the run's processes are gone
            except OSError as e:
                print(f"cluster: cannot remove the cgroup {path}: {e}", file=sys.stderr)
        self.cgroups.clear()
        if self._lock is not None:
            os.close(self._lock)  # releases the id
            self._lock = None
        self._restore_term()

    def _restore_term(self) -> None:
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None

    def _job_vars(self, base: dict) -> dict:
        """What every rank of a run gets on top of `base`: a fresh rendezvous
        at host 0 (a new port per run: no TIME_WAIT clash between runs), the
        hosts' interface, one thread per rank unless `base` says otherwise."""
        self.runs += 1
        return dict(
            MASTER_ADDR=self.address(0),
            MASTER_PORT=str(29500 + (os.getpid() + 37 * self.runs) % 1000),
            SCALECOMM_SOCKET_IFNAME="eth0",
            GLOO_SOCKET_IFNAME="eth0",
            NCCL_SOCKET_IFNAME="eth0",
            OMP_NUM_THREADS=base.get("OMP_NUM_THREADS", "1"),
        )

    def run(
        self,
        command: list[str],
        ranks_per_host: int,
        timeout: float,
        logdir: str,
        extra_env: dict,
        hosts: int | None = None,
    ) -> int:
        """Runs `command` once per rank inside its host (on the first `hosts`
        hosts, default all); returns the worst exit status."""
        from pyscalecomm.launch import rank_env, wait_ranks

        world = (hosts or self.hosts) * ranks_per_host
        base = {**os.environ, **extra_env}
        job = {**base, **self._job_vars(base)}
        procs = []
        logs = []
        try:
            for rank in range(world):
                host = rank // ranks_per_host
                env = rank_env(
                    rank, world, job["MASTER_ADDR"], job["MASTER_PORT"], local_world=ranks_per_host, base=job
                )
                # NCCL tells hosts apart by NCCL_HOSTID (else by the machine's
                # hostname and boot id, which the namespaces share): ranks of
                # different emulated hosts then meet over the capped links, even
                # where they share one GPU.
                env["SCALECOMM_HOSTNAME"] = env["NCCL_HOSTID"] = self.host_name(host)
                out = None
                if rank > 0:
                    os.makedirs(logdir, exist_ok=True)
                    out = open(os.path.join(logdir, f"cluster-rank{rank}.log"), "w")
                    logs.append(out)
                cmd = ["ip", "netns", "exec", self.host_ns(host), *command]
                procs.append(
                    subprocess.Popen(
                        cmd,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT if out else None,
                        preexec_fn=self._join(host),
                    )
                )
            return wait_ranks(procs, timeout, "cluster")
        finally:
            for p in procs:  # a failed start leaves none behind
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=10)
            for f in logs:
                f.close()

    def run_mpirun(self, command: list[str], ranks_per_host: int, timeout: float, workdir: str) -> int:
        """Runs `command` as one Open MPI job over the hosts: mpirun starts in
        host 0 and reaches the other hosts through an rsh agent that enters
        their namespaces, so MPI's own traffic between hosts crosses the
        capped links (its tcp transport; shared memory within a host)."""
        import shutil
        import tempfile

        from pyscalecomm.launch import wait_ranks

        mpirun = shutil.which("mpirun")
        if mpirun is None:
            raise RuntimeError("--mpirun needs Open MPI's mpirun on PATH (apt-get install openmpi-bin)")
        world = self.hosts * ranks_per_host
        os.makedirs(workdir, exist_ok=True)
        if self.cgroups:
            raise RuntimeError("--cpus-per-host and --host-cpus run each rank itself; leave out --mpirun")
        with tempfile.TemporaryDirectory(dir=workdir, prefix="cluster-mpirun-") as tmp:
            # mpirun calls the agent as "<agent> <host address> <command...>".
            cases = "".join(
                f"  {self.address(i)}) ns={self.host_ns(i)}; name={self.host_name(i)};;\n"
                for i in range(self.hosts)
            )
            agent = os.path.join(tmp, "agent.sh")
            with open(agent, "w") as f:
                f.write(
                    "#!/bin/sh\n"
                    "# Open MPI's rsh agent for an emulated cluster: enters the host's namespace.\n"
                    'addr="$1"; shift\n'
                    'case "$addr" in\n'
                    f"{cases}"
                    '  *) echo "cluster agent: no emulated host $addr" >&2; exit 1;;\n'
                    "esac\n"
                    # Each host gets its own hostname (a UTS namespace), by
                    # which Open MPI tells nodes apart.
                    'export SCALECOMM_HOSTNAME="$name" NCCL_HOSTID="$name"\n'
                    'exec ip netns exec "$ns" unshare --uts sh -c "hostname $name && $*"\n'
                )
            os.chmod(agent, 0o755)
            job = self._job_vars(os.environ)
            # Every rank gets the job's variables and the caller's SCALECOMM_*;
            # its host's name comes from the agent (host 0: mpirun's own env).
            env = {
                **os.environ,
                **job,
                "SCALECOMM_HOSTNAME": self.host_name(0),
                "NCCL_HOSTID": self.host_name(0),
            }
            mine = sorted(k for k in os.environ if k.startswith("SCALECOMM_") and k != "SCALECOMM_HOSTNAME")
            forwarded = [*job, *(k for k in mine if k not in job)]
            cmd = ["ip", "netns", "exec", self.host_ns(0), "unshare", "--uts", "sh", "-c"]
            cmd += ['hostname "$0" && exec "$@"', self.host_name(0), mpirun, "-n", str(world)]
            cmd += ["--host", ",".join(f"{self.address(i)}:{ranks_per_host}" for i in range(self.hosts))]
            if os.geteuid() == 0:
                cmd.append("--allow-run-as-root")
            cmd += ["--oversubscribe", "--bind-to", "none", "--mca", "plm_rsh_agent", agent]
            cmd += ["--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", "eth0"]
            cmd += ["--mca", "oob_tcp_if_include", "eth0"]
            for k in forwarded:
                cmd += ["-x", k]
            return wait_ranks([subprocess.Popen([*cmd, *command], env=env)], timeout, "cluster mpirun")


@contextlib.contextmanager
def free_cluster(hosts: int, rate: str | None, first_id: int, **kwargs):
    """A Cluster on the first id from `first_id` that no running job holds
    (two jobs at once each get their own namespaces)."""
    for cluster_id in range(first_id, 100):
        with contextlib.ExitStack() as stack:
            try:
                cluster = stack.enter_context(Cluster(hosts, rate, cluster_id, **kwargs))
            except ClusterBusy:
                continue
            yield cluster
            return
    raise RuntimeError(f"every cluster id from {first_id} to 99 is in use by a running job")


def host_cpus(hosts: int, per_host: float | None, overrides: str) -> dict[int, float]:
    """Host -> CPU share in cores from --cpus-per-host and --host-cpus."""
    cpus = {h: per_host for h in range(hosts)} if per_host is not None else {}
    for item in filter(None, (s.strip() for s in overrides.split(","))):
        host, sep, cores = item.partition(":")
        if not sep or not host.isdigit() or int(host) >= hosts:
            raise ValueError(f"--host-cpus {item!r}: give host:cores, a host in 0..{hosts - 1}, e.g. 3:0.2")
        try:
            cpus[int(host)] = float(cores)
        except ValueError:
            raise ValueError(f"--host-cpus {item!r}: the share is a number of cores, e.g. 3:0.2") from None
    bad = [c for c in cpus.values() if not 0.01 <= c <= 1024]
    if bad:
        raise ValueError(f"a host's CPU share must lie in 0.01..1024 cores, got {bad[0]:g}")
    return cpus


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m pyscalecomm.cluster",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--hosts", type=int, default=2, help="emulated hosts (network namespaces), 1-64")
    p.add_argument("--ranks-per-host", type=int, default=1, help="ranks each emulated host runs")
    p.add_argument(
        "--rate",
        type=rate_text,
        default=None,
        help="link cap per host and direction: bits as 1gbit, 10Gbit, 10Gbps; bytes as 1.25GB/s "
        "(default: none, links as fast as the veth pairs go)",
    )
    p.add_argument(
        "--queue-ms",
        type=float,
        default=100,
        help="longest a packet may wait in a capped link's queue (tbf latency; default 100, "
        "a deep buffer; shallow switch buffers are a few ms)",
    )
    p.add_argument(
        "--burst",
        type=int,
        default=None,
        help="bytes a capped link may pass above its rate after an idle spell (the tbf bucket; default "
        "4 ms of traffic at the rate, at least 64 KiB)",
    )
    p.add_argument(
        "--cpus-per-host",
        type=float,
        default=None,
        help="CPU share of every host in cores (0.4: 40 ms of CPU time per 100 ms), through a cgroup per "
        "host (default: none, the hosts share the machine's cores)",
    )
    p.add_argument(
        "--host-cpus",
        default="",
        help="per-host shares that differ, host:cores[,host:cores] (e.g. 3:0.2, a straggler host)",
    )
    p.add_argument("--id", type=int, default=0, help="cluster id (names sc<id>...), 0-99")
    p.add_argument("--timeout", type=float, default=600, help="seconds the command may run")
    p.add_argument("--logdir", default=".", help="where ranks > 0 write their output")
    p.add_argument(
        "--mpirun",
        action="store_true",
        help="run the command as one Open MPI job (mpirun in host 0, an rsh agent entering the other "
        "hosts; SCALECOMM_* variables forwarded) instead of once per rank with env:// variables",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command each rank runs")
    add_version(p)
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        p.error("give the command after --, e.g. -- python -m pyscalecomm.bench -b 1M -e 16M")
    if not 1 <= args.hosts <= 64 or not 1 <= args.ranks_per_host <= 64 or not 0 <= args.id <= 99:
        p.error("--hosts and --ranks-per-host must lie in 1..64, --id in 0..99")
    if not 0.1 <= args.queue_ms <= 10000:
        p.error("--queue-ms must lie in 0.1..10000")
    try:
        args.cpus = host_cpus(args.hosts, args.cpus_per_host, args.host_cpus)
    except ValueError as e:
        p.error(str(e))
    if args.cpus and args.mpirun:
        p.error("--cpus-per-host and --host-cpus run each rank itself; leave out --mpirun")
    if args.burst is not None and not 65536 <= args.burst <= 1 << 30:
        p.error("--burst must lie in 65536..1073741824 bytes (a 64 KiB GSO packet must fit the bucket)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print(
            "pyscalecomm.cluster needs root (network namespaces and tc); run it with sudo. "
            "Nothing was changed."
        )
        return 2

    try:
        with Cluster(
            args.hosts, args.rate, args.id, queue_ms=args.queue_ms, burst=args.burst, cpus=args.cpus
        ) as cluster:
            shares = ", ".join(f"host {h} {c:g} cores" for h, c in sorted(args.cpus.items()))
            print(
                f"# cluster: {args.hosts} hosts x {args.ranks_per_host} ranks, "
                f"links {args.rate or 'uncapped'} each way per host, namespaces {cluster.prefix}h0.."
                + (f"; CPU shares: {shares}" if shares else ""),
                flush=True,
            )
            if args.mpirun:
                return cluster.run_mpirun(args.command, args.ranks_per_host, args.timeout, args.logdir)
            return cluster.run(args.command, args.ranks_per_host, args.timeout, args.logdir, {})
    except KeyboardInterrupt:
        print("cluster: interrupted; torn down", file=sys.stderr)
        return 130
    except RuntimeError as e:
        print(f"cluster: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"cluster: setup failed: {' '.join(e.cmd)}: {e.stderr.strip()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
