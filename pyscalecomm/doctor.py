"""Checks a machine for scalecomm and says what to fix: ``python -m pyscalecomm doctor``.

Each check is a function that returns :class:`Check` rows (ok, warn or fail,
what was found, and for anything but ok what to do), so the report and the
tests read the same results. ``python -m pyscalecomm info`` prints the
versions and settings only; ``--quick`` skips the measured 2-rank check.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
import time
from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass
class Check:
    name: str
    status: str
    found: str
    todo: str = ""


# -- versions and build --------------------------------------------------------


def versions() -> list[Check]:
    import torch

    import pyscalecomm
    from pyscalecomm import _C

    built = pyscalecomm._built_for()
    rows = [
        Check("scalecomm", OK, f"{pyscalecomm.__version__} ({os.path.dirname(pyscalecomm.__file__)})"),
        Check("torch", OK, f"{torch.__version__}; the extension was built for torch {built}"),
        Check("build: MPI transport", OK, "compiled in" if _C.built_with_mpi else "not compiled in"),
        Check(
            "build: CUDA",
            OK,
            ("compiled in" if _C.built_with_cuda else "not compiled in")
            + f"; torch CUDA {torch.version.cuda or 'none'}; GPUs visible: {torch.cuda.device_count()}",
        ),
        Check("build: NCCL", OK, "compiled in" if _C.built_with_nccl else "not compiled in"),
    ]
    if _C.built_with_mpi and _C.mpi_library_version():
        rows.append(Check("MPI library", OK, _C.mpi_library_version().splitlines()[0]))
    try:
        import mpi4py

        rows.append(Check("mpi4py", OK, f"{mpi4py.__version__} (mpirun/srun launch without variables)"))
    except ImportError:
        rows.append(
            Check(
                "mpi4py",
                WARN,
                "not installed: under mpirun, ranks cannot find each other without MASTER_ADDR/MASTER_PORT",
                "pip install mpi4py (needs an MPI, e.g. apt-get install libopenmpi-dev), "
                "or launch with torchrun",
            )
        )
    return rows


def settings(environ=None, defaults: bool = True) -> list[Check]:
    """Every setting's effective value and where it comes from (without
    ``defaults``: those set, and one row counting the others); unknown
    SCALECOMM_* variables (typos) warned."""
    import pyscalecomm

    environ = os.environ if environ is None else environ
    declared = {p["name"]: p for p in pyscalecomm.params()}
    rows = []
    for name, p in declared.items():
        if name in environ:
            rows.append(
                Check(name, OK, f"{environ[name]} (environment; default {p['default'] or '(empty)'})")
            )
        elif defaults:
            rows.append(Check(name, OK, f"{p['default'] or '(empty)'} (default)"))
    if not defaults:
        left = sum(name not in environ for name in declared)
        rows.append(Check("other settings", OK, f"{left} at their defaults (`python -m pyscalecomm info`)"))
    import difflib

    for name in sorted(environ):
        if name.startswith("SCALECOMM_") and name not in declared:
            close = difflib.get_close_matches(name, list(declared), n=1)
            rows.append(
                Check(
                    name,
                    WARN,
                    f"{environ[name]}: not a scalecomm setting, ignored",
                    f"did you mean {close[0]}?"
                    if close
                    else "unset it; `python -m pyscalecomm info` lists the settings",
                )
            )
    return rows


# -- this machine ------------------------------------------------------------


def _shm_param(environ, name: str) -> int:
    import pyscalecomm
    from pyscalecomm import _C

    default = next(p["default"] for p in pyscalecomm.params() if p["name"] == name)
    return _C.parse_size(environ.get(name, default))


def shared_memory(local_ranks: int, environ=None, path: str = "/dev/shm") -> list[Check]:
    """Whether `path` holds the segments of one group of `local_ranks` ranks
    (each rank maps one segment with a ring per peer and its windows)."""
    from pyscalecomm import _C

    environ = os.environ if environ is None else environ
    ring = _shm_param(environ, "SCALECOMM_SHM_RING_BYTES")
    window = _shm_param(environ, "SCALECOMM_SHM_WINDOW_BYTES")
    need = local_ranks * _C.shm_segment_bytes(local_ranks, ring, window)
    try:
        st = os.statvfs(path)
    except OSError as e:
        return [
            Check(
                "shared memory",
                WARN,
                f"{path}: {e}",
                "ranks on this host will talk over TCP; mount a tmpfs on /dev/shm for the shm transport",
            )
        ]
    free, size = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    found = (
        f"{path}: {size / 2**20:.0f} MiB, {free / 2**20:.0f} MiB free; "
        f"one group of {local_ranks} local ranks "
        f"needs {need / 2**20:.1f} MiB (rings of {ring // 1024} KiB, windows of {window // 1024} KiB)"
    )
    if free < need:
        return [
            Check(
                "shared memory",
                FAIL,
                found,
                "enlarge /dev/shm (docker run --shm-size=1g; mount -o remount,size=1G /dev/shm), lower "
                "SCALECOMM_SHM_RING_BYTES, or use SCALECOMM_TRANSPORT=tcp",
            )
        ]
    if free < 4 * need:
        return [
            Check(
                "shared memory",
                WARN,
                found + "; room for fewer than 4 such groups (DDP and its subgroups each take one)",
                "enlarge /dev/shm (docker run --shm-size=1g) or lower SCALECOMM_SHM_RING_BYTES",
            )
        ]
    return [Check("shared memory", OK, found)]


def _cgroup_cpus() -> float | None:
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def cores(local_ranks: int, affinity: set[int] | None = None) -> list[Check]:
    """Cores this process may run on against the ranks a host will run."""
    affinity = os.sched_getaffinity(0) if affinity is None else affinity
    online = os.cpu_count() or 1
    quota = _cgroup_cpus()
    usable = min(len(affinity), quota) if quota else len(affinity)
    found = f"{online} online, this process may use {len(affinity)} ({sorted(affinity)[:16]})"
    if quota:
        found += f", cgroup quota {quota:g} CPUs"
    rows = []
    if len(affinity) == 1 and online > 1:
        rows.append(
            Check(
                "CPU binding",
                WARN,
                found + ": bound to one core, and ranks started from here inherit it and share it",
                "launch unbound: mpirun --bind-to none (or --bind-to core with one core per rank), "
                "taskset/numactl with a core per rank",
            )
        )
    else:
        rows.append(Check("CPU binding", OK, found))
    if local_ranks > usable:
        rows.append(
            Check(
                "ranks per core",
                WARN,
                f"{local_ranks} ranks on {usable:g} usable cores: ranks wait for each other's cores "
                "(scalecomm stops spinning then; timings are not a core per rank)",
                "run at most one rank per core, or OMP_NUM_THREADS=1 and expect oversubscribed timings",
            )
        )
    return rows


def ptrace_scope(path: str = "/proc/sys/kernel/yama/ptrace_scope") -> list[Check]:
    try:
        scope = int(open(path).read().strip())
    except (OSError, ValueError):
        return [
            Check("ptrace scope", OK, "no Yama LSM: peers may read each other's memory (process_vm_readv)")
        ]
    if scope == 0:
        return [
            Check("ptrace scope", OK, "0: same-user processes may read each other's memory (single copy)")
        ]
    return [
        Check(
            "ptrace scope",
            OK,
            f"{scope}: processes cannot read each other's memory "
            "(so no process_vm_readv single copy; shared memory copies through its windows, "
            "which is what scalecomm's shared-memory path does anyway)",
        )
    ]


def _interfaces() -> list[tuple[str, str]]:
    import fcntl
    import struct

    out = []
    for _, name in socket.if_nameindex():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            req = struct.pack("256s", name.encode()[:15])
            addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR
            out.append((name, addr))
        except OSError:
            pass
        finally:
            s.close()
    return out


def network(environ=None) -> list[Check]:
    environ = os.environ if environ is None else environ
    interfaces = _interfaces()
    listed = ", ".join(f"{n} {a}" for n, a in interfaces) or "none with an IPv4 address"
    rows = [Check("IPv4 interfaces", OK, listed)]
    forced = environ.get("SCALECOMM_SOCKET_IFNAME", "")
    if forced:
        match = [a for n, a in interfaces if n == forced]
        if not match:
            return rows + [
                Check(
                    "TCP interface",
                    FAIL,
                    f"SCALECOMM_SOCKET_IFNAME={forced}: no such interface with an IPv4 address",
                    f"set it to one of: {', '.join(n for n, _ in interfaces)}",
                )
            ]
        return rows + [Check("TCP interface", OK, f"{forced} {match[0]} (SCALECOMM_SOCKET_IFNAME)")]
    master = environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((socket.gethostbyname(master), 9))  # no packet: picks the route's local end
        local = s.getsockname()[0]
        s.close()
    except OSError as e:
        return rows + [
            Check(
                "TCP interface",
                FAIL,
                f"no route to MASTER_ADDR={master}: {e}",
                "set MASTER_ADDR to rank 0's reachable address, or SCALECOMM_SOCKET_IFNAME",
            )
        ]
    name = next((n for n, a in interfaces if a == local), "?")
    found = f"{name} {local} (the route to MASTER_ADDR={master})"
    if ipaddress.ip_address(local).is_loopback and master not in ("127.0.0.1", "localhost"):
        return rows + [
            Check("TCP interface", WARN, found, "peers on other hosts cannot reach a loopback address")
        ]
    return rows + [Check("TCP interface", OK, found)]


# -- a measured check ----------------------------------------------------------


def _median_us(fn, calls: int, rounds: int) -> float:
    """The median over rounds of fn's mean time per call, in microseconds."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return sorted(times)[len(times) // 2]


def _rank(rank: int, port: int, queue) -> None:
    try:
        import torch
        import torch.distributed as dist

        import pyscalecomm  # noqa: F401

        torch.set_num_threads(1)
        dist.init_process_group("scalecomm", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        check = torch.full((1000,), float(rank + 1))
        dist.all_reduce(check)
        ok = bool(torch.equal(check, torch.full((1000,), 3.0)))
        small, big, copy = torch.zeros(2), torch.zeros(1 << 18), torch.zeros(1 << 18)  # 8 B, 1 MiB
        try:  # torch's own dispatch, a group that moves nothing: the floor no backend goes below
            import torch.testing._internal.distributed.fake_pg  # noqa: F401

            fake = dist.new_subgroups(group_size=1, backend="fake")[0]
        except Exception:  # noqa: BLE001 - a torch without it: judged against the fixed bound only
            fake = None
        dist.all_reduce(small)
        dist.all_reduce(big)
        times = {}
        for _ in range(2):  # the second pass is the one kept: both ranks warm
            dist.barrier()
            times["8 B"] = _median_us(lambda: dist.all_reduce(small), 200, 5)
            times["1 MiB"] = _median_us(lambda: dist.all_reduce(big), 20, 5)
            times["floor"] = _median_us(lambda: dist.all_reduce(small, group=fake), 200, 5) if fake else 0.0
            times["memcpy 1 MiB"] = _median_us(lambda: copy.copy_(big), 20, 5)
        transport = os.environ.get("SCALECOMM_TRANSPORT", "auto")
        dist.destroy_process_group()
        queue.put((rank, ok, times, transport))
    except BaseException as e:  # noqa: BLE001 - reported by the parent
        queue.put((rank, False, repr(e), ""))


# What a 2-rank allreduce on one host should cost above torch's dispatch
# (8 B; shared memory takes 1-5 us on a busy 2-core VM) and against one
# memcpy of the message (1 MiB; 2-4x on that VM). Beyond these a rank is
# waiting for a core, not for the transport.
SMALL_OVER_FLOOR_US = 25.0
LARGE_OVER_MEMCPY = 10.0


def judge(times: dict) -> tuple[str, str]:
    """(status, what to do) for a measured 8 B and 1 MiB allreduce."""
    over = times["8 B"] - times["floor"]
    slow = []
    if over > SMALL_OVER_FLOOR_US:
        slow.append(f"8 B takes {over:.0f} us above torch's own dispatch (normal: a few us)")
    if times["memcpy 1 MiB"] > 0 and times["1 MiB"] > LARGE_OVER_MEMCPY * times["memcpy 1 MiB"]:
        ratio = times["1 MiB"] / times["memcpy 1 MiB"]
        slow.append(f"1 MiB takes {ratio:.0f}x one memcpy of it (normal: 2-4x)")
    if not slow:
        return OK, ""
    return WARN, (
        "; ".join(slow) + ": the ranks wait for a core. Check the CPU binding above (mpirun --bind-to none, "
        "or one core per rank), other load (top), and containers' CPU quota; then run this again"
    )


def measured(timeout_s: float = 60.0) -> list[Check]:
    """Two local ranks: an exact allreduce, and its time at 8 B and 1 MiB
    judged against torch's dispatch and a memcpy measured in the same ranks."""
    import multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < 2 and time.monotonic() < deadline:
            try:
                rank, ok, times, transport = queue.get(timeout=1.0)
                results[rank] = (ok, times, transport)
            except Exception:  # noqa: BLE001 - queue.Empty: keep waiting until the deadline
                if any(p.exitcode not in (None, 0) for p in procs):
                    break
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    if len(results) < 2 or not all(ok for ok, _, _ in results.values()):
        detail = "; ".join(f"rank {r}: {t}" for r, (_, t, _) in sorted(results.items()) if isinstance(t, str))
        return [
            Check(
                "2-rank allreduce",
                FAIL,
                detail or f"the ranks did not finish in {timeout_s:.0f} s",
                "rerun with SCALECOMM_DEBUG=INFO; docs/errors.md lists the usual causes",
            )
        ]
    times = results[0][1]
    floor = f", torch's dispatch {times['floor']:.1f} us" if times["floor"] else ""
    found = (
        f"exact; 8 B in {times['8 B']:.1f} us{floor}; 1 MiB in {times['1 MiB']:.0f} us "
        f"({(1 << 20) / times['1 MiB'] / 1e3:.2f} GB/s busbw, one memcpy {times['memcpy 1 MiB']:.0f} us); "
        f"transport={results[0][2]}; medians of 5 rounds"
    )
    status, todo = judge(times)
    return [Check("2-rank allreduce", status, found, todo)]


# -- the report ---------------------------------------------------------------


def report(rows: list[Check]) -> str:
    lines = []
    for c in rows:
        lines.append(f"[{c.status:>4}] {c.name}: {c.found}")
        if c.todo:
            lines.append(f"       -> {c.todo}")
    return "\n".join(lines)


def main(argv=None) -> int:
    from pyscalecomm._cli import add_version

    p = argparse.ArgumentParser(
        prog="python -m pyscalecomm",
        description="Checks this machine for scalecomm (doctor) or prints versions and settings (info).",
    )
    add_version(p)
    p.add_argument(
        "command", choices=["doctor", "info"], help="doctor: every check; info: versions and settings"
    )
    p.add_argument(
        "--nproc-per-node",
        "--nproc",
        dest="nproc",
        type=int,
        default=os.cpu_count() or 1,
        help="ranks this host will run, for the shared-memory and core checks (default: the online CPUs)",
    )
    p.add_argument("--quick", action="store_true", help="skip the measured 2-rank check (a few seconds)")
    args = p.parse_args(argv)
    doctor = args.command == "doctor"
    rows = versions() + settings(defaults=not doctor)
    if doctor:
        rows += shared_memory(args.nproc) + cores(args.nproc) + ptrace_scope() + network()
    print(report(rows), flush=True)
    if doctor and not args.quick:
        print("... timing a 2-rank allreduce against torch's dispatch and a memcpy (15 s)", flush=True)
        more = measured()
        print(report(more), flush=True)
        rows += more
    warns = sum(c.status == WARN for c in rows)
    fails = sum(c.status == FAIL for c in rows)
    if args.command == "doctor":
        print(f"\n{len(rows)} checks: {fails} failed, {warns} warnings")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
