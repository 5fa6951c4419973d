"""Bad input and faults: clear errors naming collective, rank and seq; no hang
past the timeout; no silent corruption; a poisoned group raises until destroyed;
nothing left in /dev/shm."""

import glob
import os
import signal
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from dist_helpers import RankError, run_ranks


def _backend():
    return dist.group.WORLD._get_backend(torch.device("cpu"))


def _error_of(call, kind=dist.DistBackendError):
    """The text of the `kind` error that call() raises, or "no error"."""
    try:
        call()
    except kind as e:
        return str(e)
    return "no error"


def _timed_error_of(call):
    """(text, seconds) of the DistBackendError that call() raises, or "no error"."""
    start = time.monotonic()
    text = _error_of(call)
    return text if text == "no error" else (text, time.monotonic() - start)


def _local_errors(rank, n):
    msgs = []
    bad_calls = [
        lambda: dist.all_reduce(torch.ones(4, 4).to_sparse()),  # sparse
        lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND),  # op/dtype
        lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool)),  # dtype
        lambda: dist.broadcast(torch.ones(4), src=7),  # root range
        lambda: dist.all_gather([torch.ones(4)] * (n + 1), torch.ones(4)),  # list size
        lambda: dist.all_gather_into_tensor(torch.ones(3), torch.ones(4)),  # output size
    ]
    for call in bad_calls:
        try:
            call()
            msgs.append("no error")
        except ValueError as e:
            msgs.append(str(e))
    t = torch.ones(6)
    dist.all_reduce(t)  # the group is still usable
    assert torch.equal(t, torch.full((6,), float(n)))
    return msgs


def test_local_argument_errors_are_value_errors_and_leave_the_group_usable():
    for rank, msgs in enumerate(run_ranks(2, _local_errors)):
        assert len(msgs) == 6
        for m in msgs:
            assert m.startswith("scalecomm "), m
            assert f"(rank {rank}" in m, m
        assert "not supported; pass a dense tensor" in msgs[0], msgs[0]
        assert "band" in msgs[1] and "integer" in msgs[1]
        assert "cannot be reduced" in msgs[2]
        assert "out of range" in msgs[3]
        assert "output list has 3" in msgs[4]
        assert "world size" in msgs[5]


def _bad_splits(rank, n):
    """all_to_all_single split sizes that would reach pointer arithmetic: each
    raises ValueError on the calling rank, and every rank's output and the
    group stay intact."""
    inp = torch.arange(4.0)
    out = torch.full((4,), -7.0)
    cases = [
        ([-1, 5], [-1, 5]),  # negative, yet summing to the row count
        ([5, -1], [2, 2]),  # the same on the output side
        ([2, 2], [2**62, 4 - 2**62]),  # overflowing partial sums
        ([2**63 - 1, 2], [2, 2]),
        ([4], [4]),  # too few entries
        ([1, 1], [2, 2]),  # sum short of the rows
    ]
    msgs = []
    for out_splits, in_splits in cases:
        try:
            dist.all_to_all_single(out, inp, out_splits, in_splits)
            msgs.append("no error")
        except ValueError as e:
            msgs.append(str(e))
    assert torch.equal(out, torch.full((4,), -7.0)), out  # nothing written
    dist.all_to_all_single(out, inp)  # the group is still usable
    assert torch.equal(out, torch.cat([torch.arange(2.0) + 2 * rank] * n)), out
    return msgs


def test_all_to_all_single_refuses_bad_split_sizes_before_any_communication():
    for rank, msgs in enumerate(run_ranks(2, _bad_splits)):
        assert len(msgs) == 6
        for m in msgs:
            assert m.startswith(f"scalecomm all_to_all_single (rank {rank})"), m
        assert "is negative" in msgs[0] and "input_split_sizes[0] = -1" in msgs[0], msgs[0]
        assert "output_split_sizes[0] = 5 runs past" in msgs[1], msgs[1]
        assert "input_split_sizes[0]" in msgs[2] and "runs past" in msgs[2], msgs[2]
        assert "output_split_sizes[0]" in msgs[3] and "runs past" in msgs[3], msgs[3]
        assert "has 1 entries but the group has 2 ranks" in msgs[4], msgs[4]
        assert "sum to 2" in msgs[5], msgs[5]


def _mismatch(rank, n, kind):
    if kind == "size":
        t = torch.ones(1000 if rank == 0 else 1024)
    elif kind == "dtype":
        t = torch.ones(256, dtype=torch.float32 if rank == 0 else torch.int32)
    else:
        t = torch.ones(256)
    op = dist.ReduceOp.MAX if (kind == "op" and rank == 1) else dist.ReduceOp.SUM
    first = _error_of(lambda: dist.all_reduce(t, op=op))
    later = _error_of(lambda: dist.all_reduce(torch.ones(4)))
    return (None if first == "no error" else first), later


def test_mismatched_shapes_dtypes_and_ops_fail_every_rank_with_both_values():
    for kind, needles in [
        ("size", ["1000", "1024"]),
        ("dtype", ["float32", "int32"]),
        ("op", ["max", "sum"]),
    ]:
        out = run_ranks(2, _mismatch, kind)
        for rank, (first, later) in enumerate(out):
            assert first is not None, f"{kind}: rank {rank} saw no error (silent corruption?)"
            assert f"scalecomm allreduce (rank {rank}, seq 1)" in first, first
            assert all(x in first for x in needles) or "closed" in first, first
            assert "unusable" in later, later
        joined = out[0][0] + out[1][0]
        assert all(x in joined for x in needles), joined


def _configured(rank, n):
    return _error_of(lambda: dist.all_reduce(torch.ones(64 << 10)))


def test_ranks_configured_differently_fail_naming_the_setting():
    for env, either in [
        (
            {"SCALECOMM_ALGO": ["ring", "rhd"]},
            [
                "runs it with algorithm rhd but this rank with ring",
                "runs it with algorithm ring but this rank with rhd",
            ],
        ),
        (
            {"SCALECOMM_ALGO": "ring", "SCALECOMM_SEGMENT_BYTES": [16384, 65536]},
            ["encodes its messages differently: its SCALECOMM_SEGMENT_BYTES"],
        ),
        (  # the group default codec's parameters: the same codec, other levels
            {"SCALECOMM_COMPRESSION": ["qsgd:8", "qsgd:2"]},
            ["compression codec (SCALECOMM_COMPRESSION"],
        ),
        (  # one rank compresses, the other does not
            {"SCALECOMM_COMPRESSION": ["topk:0.01", "none"]},
            ["compression codec (SCALECOMM_COMPRESSION"],
        ),
    ]:
        out = run_ranks(2, _configured, env=env)
        for rank in (0, 1):
            assert out[rank].startswith("scalecomm allreduce"), out[rank]
            assert f"(rank {rank}, seq 1)" in out[rank], out[rank]
        assert any(x in out[0] + out[1] for x in either), out


def _root_mismatch(rank, n, kind, count):
    """Every rank names itself as the root (src) of one broadcast or scatter,
    then the ranks go on: every rank must fail, none may go on with
    replicas that differ."""
    if kind == "broadcast":
        t = torch.full((count,), float(rank))
        first = _error_of(lambda: dist.broadcast(t, src=rank), Exception)
    else:
        out = torch.zeros(count)
        chunks = [torch.full((count,), float(10 * rank + q)) for q in range(n)]
        first = _error_of(lambda: dist.scatter(out, chunks, src=rank), Exception)
    after = []
    # small calls (on the shared windows where the ranks have them), a barrier, a large one
    for call in (
        lambda: dist.all_reduce(torch.ones(4)),
        lambda: dist.all_reduce(torch.ones(4)),
        dist.barrier,
        lambda: dist.all_reduce(torch.ones(1 << 20)),
    ):
        after.append(_error_of(call, Exception))
        if after[-1] != "no error":
            break
    return first, after


@pytest.mark.parametrize("kind", ["broadcast", "scatter"])
@pytest.mark.parametrize("n", [2, 3])
def test_a_root_that_differs_between_ranks_fails_every_rank(kind, n):
    env = {"SCALECOMM_TUNING_FILE": "none"}  # auto's defaults: small calls on the shared windows
    out = run_ranks(n, _root_mismatch, kind, 256, env=env, group_timeout_s=10)
    for rank, (first, after) in enumerate(out):
        failed = [x for x in [first, *after] if x != "no error"]
        assert failed, f"rank {rank}: every call succeeded after roots differed: {first} {after}"
    texts = " ".join(x for _, after in out for x in after)
    assert f"of its {kind} seq 1 (root/src" in texts and "never received" in texts, texts


def _call_while_a_peer_is_stopped(rank, n, victim):
    """The other rank stops `victim` (SIGSTOP: a debugger, a frozen VM, a
    partition) and times its next allreduce. When the victim is rank 0, its
    process hosts the store the desync report asks through."""
    store = dist.distributed_c10d._get_default_store()
    store.set(f"pid/{rank}", str(os.getpid()))
    dist.all_reduce(torch.ones(4))
    if rank == victim:
        store.wait(["resumed"], timedelta(seconds=60))  # stopped in here, then woken
        return "victim"
    pid = int(store.get(f"pid/{victim}").decode())
    resume = threading.Timer(20, os.kill, (pid, signal.SIGCONT))  # whatever happens below
    resume.start()
    os.kill(pid, signal.SIGSTOP)
    try:
        result = _timed_error_of(lambda: dist.all_reduce(torch.ones(4)))
    finally:
        os.kill(pid, signal.SIGCONT)
        resume.cancel()
    store.set("resumed", "1")
    return result


@pytest.mark.parametrize("victim", [0, 1], ids=["store-host-stopped", "peer-stopped"])
def test_a_stopped_peer_or_store_host_fails_the_call_at_its_timeout(victim):
    timeout = 3.0
    out = run_ranks(2, _call_while_a_peer_is_stopped, victim, group_timeout_s=timeout, timeout_s=90)
    text, seconds = out[1 - victim]
    assert "Timed out after 3000 ms" in text, text
    # At the timeout plus the desync report's bound (300 ms), not after the
    # store's own timeout or a wait for the stopped rank's answer.
    assert seconds < timeout + 1.2, (seconds, text)
    if victim == 0:
        assert "the store did not answer within 300 ms" in text, text
    else:
        assert "rank(s) 1 did not answer" in text, text


def _absent_peer(rank, n):
    if rank == 1:
        time.sleep(4)  # never calls the collective, then leaves
        return None
    return _timed_error_of(lambda: dist.all_reduce(torch.ones(10)))


def test_rank_that_never_calls_times_out_naming_it():
    out = run_ranks(2, _absent_peer, group_timeout_s=1.5)
    msg, elapsed = out[0]
    assert "scalecomm allreduce (rank 0, seq 1): Timed out after 1500 ms waiting for rank 1" in msg, msg
    assert 1.4 < elapsed < 3.5, elapsed


def _killed_mid_allreduce(rank, n):
    big = torch.ones(16 << 20)  # 64 MiB: several ms of traffic
    if rank == 2:
        dist.all_reduce(big, async_op=True)
        time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        for _ in range(20):
            dist.all_reduce(big)
        return "no error"
    except dist.DistBackendError as e:
        return str(e), time.monotonic() - start, glob.glob(f"/dev/shm/scalecomm-{os.getpid()}-*")


def _dies_while_a_peer_receives_from_any_source(rank, n):
    if rank == 2:
        time.sleep(0.5)
        os._exit(3)
    if rank == 1:
        dist.send(torch.full((4,), 7.0), dst=0)  # queued before rank 2 leaves: still received
        time.sleep(3)
        return "sent"
    got = torch.zeros(4)
    first = dist.recv(got)
    start = time.monotonic()
    try:
        dist.recv(torch.zeros(4))
        return "no error"
    except dist.DistBackendError as e:
        return first, got.tolist(), str(e), time.monotonic() - start


def test_a_peer_that_dies_during_a_receive_from_any_source_is_named_not_waited_for():
    out = run_ranks(3, _dies_while_a_peer_receives_from_any_source, group_timeout_s=300, allow_missing=(2,))
    first, got, msg, elapsed = out[0]
    assert first == 1 and got == [7.0] * 4
    # shm: the peer's pid is gone; tcp: its connection closed
    assert "recv from any source (rank 0): rank 2" in msg, msg
    assert "died" in msg or "closed its tcp connection" in msg, msg
    assert elapsed < 10, elapsed  # not the group's 300 s timeout


def _receives_from_a_peer_that_left(rank, n):
    if rank == 1:
        return None  # leaves the group (the harness destroys it) without sending
    return _timed_error_of(lambda: dist.recv(torch.zeros(4), src=1))


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_a_receive_from_a_peer_that_left_in_order_says_so(transport):
    out = run_ranks(
        2, _receives_from_a_peer_that_left, env={"SCALECOMM_TRANSPORT": transport}, group_timeout_s=300
    )
    msg, elapsed = out[0]
    assert "(rank 0" in msg and "rank 1 left the group (destroy_process_group or exit)" in msg, msg
    assert elapsed < 10, elapsed  # not the group's 300 s timeout


def _allreduce_with_a_peer_that_left(rank, n):
    if rank == 1:
        return None  # leaves the group (the harness destroys it)
    time.sleep(1.0)  # rank 1 has left by now
    return _timed_error_of(lambda: dist.all_reduce(torch.ones(1000)))


@pytest.mark.parametrize(
    "env",
    [
        {"SCALECOMM_ALGO": "ring", "SCALECOMM_TRANSPORT": "shm"},  # the first step sends to the peer
        {"SCALECOMM_ALGO": "shared", "SCALECOMM_TRANSPORT": "shm"},
        {"SCALECOMM_ALGO": "ring", "SCALECOMM_TRANSPORT": "tcp"},
    ],
)
def test_a_collective_with_a_peer_that_left_in_order_says_so(env):
    out = run_ranks(2, _allreduce_with_a_peer_that_left, env=env, group_timeout_s=300)
    msg, elapsed = out[0]
    assert "scalecomm allreduce (rank 0" in msg and "rank 1 left the group" in msg, msg
    assert elapsed < 10, elapsed


def test_rank_killed_mid_allreduce_raises_on_every_survivor_quickly():
    for env in [
        {},
        {"SCALECOMM_TRANSPORT": "tcp"},
        {"SCALECOMM_TRANSPORT": "tcp", "SCALECOMM_SOCKETS_PER_PEER": 4},
    ]:
        out = run_ranks(
            3, _killed_mid_allreduce, env=env, group_timeout_s=30, expect_errors=True, allow_missing=(2,)
        )
        for rank in (0, 1):
            msg, elapsed, leftovers = out[rank]
            assert f"scalecomm allreduce (rank {rank}, seq" in msg, msg
            assert "died" in msg or "closed" in msg, msg
            assert elapsed < 10, f"took {elapsed}s (timeout is 30s): detection must not wait for the timeout"
            assert leftovers == []


def _wait_timeout(rank, n):
    if rank == 1:
        time.sleep(3)
        return None
    work = dist.all_reduce(torch.ones(10), async_op=True)
    first = _error_of(lambda: work.wait(timeout=timedelta(milliseconds=300)), RuntimeError)
    later = _error_of(lambda: dist.all_reduce(torch.ones(10)))
    return first, later


def test_wait_timeout_poisons_the_group():
    first, later = run_ranks(2, _wait_timeout)[0]
    assert "Timed out after 300 ms" in first and "(rank 0, seq 1)" in first, first
    assert "unusable" in later, later


def _abort_wakes_waiter(rank, n):
    if rank == 1:
        time.sleep(3)
        return None
    threading.Timer(0.5, lambda: _backend().abort()).start()
    return _timed_error_of(lambda: dist.all_reduce(torch.ones(10)))  # rank 1 never joins; timeout 60 s


def test_abort_from_another_thread_wakes_the_waiter():
    msg, elapsed = run_ranks(2, _abort_wakes_waiter, group_timeout_s=60)[0]
    assert "abort" in msg, msg
    assert elapsed < 5, elapsed


def _large(rank, n):
    count = (1 << 31) + 5
    t = torch.ones(count, dtype=torch.int8)
    dist.all_reduce(t)
    assert bool(t[0] == n) and bool(t[-1] == n)
    start = time.monotonic()
    dist.all_reduce(t)  # again, timed: n*n everywhere
    elapsed = time.monotonic() - start
    ok = bool(t[-1] == n * n) and bool(t[1 << 31] == n * n) and bool((t == n * n).all())
    del t
    return ok, elapsed


def test_more_than_2_pow_31_elements():
    out = run_ranks(2, _large, timeout_s=300)
    assert [ok for ok, _ in out] == [True, True], out


def _segments_during_group(rank, n):
    t = torch.ones(3)
    dist.all_reduce(t)
    return glob.glob(f"/dev/shm/scalecomm-{os.getpid()}-*")


def test_no_shared_memory_name_outlives_rendezvous():
    assert run_ranks(2, _segments_during_group) == [[], []]


def test_stale_segments_of_dead_processes_are_removed():
    import subprocess

    import pyscalecomm

    # A name left by a process killed with -9 before it could unlink it:
    # scalecomm-<pid>-<pid namespace>-<nonce>. The same pid in another PID
    # namespace (a container sharing /dev/shm) says nothing about that process.
    dead = subprocess.Popen(["sleep", "0"])
    dead.wait()
    ns = os.stat("/proc/self/ns/pid").st_ino
    path = f"/dev/shm/scalecomm-{dead.pid}-{ns:x}-deadbeef"
    foreign = f"/dev/shm/scalecomm-{dead.pid}-{ns + 1:x}-deadbeef"
    for p in (path, foreign):
        with open(p, "wb") as f:
            f.write(b"\0" * 64)
    try:
        assert pyscalecomm._C.remove_stale_shm_segments() >= 1
        assert not os.path.exists(path)
        assert os.path.exists(foreign)
    finally:
        for p in (path, foreign):
            if os.path.exists(p):
                os.unlink(p)


def test_errors_carry_the_type_torch_users_catch():
    out = run_ranks(2, _mismatch, "size")
    assert not any(isinstance(x, RankError) for x in out)


_EXIT_MID_COLLECTIVE = """
import sys, time
from datetime import timedelta
import torch, torch.distributed as dist
import pyscalecomm
rank, port, peer_joins = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
dist.init_process_group("scalecomm", init_method="tcp://127.0.0.1:" + port, rank=rank, world_size=2,
                        timeout=timedelta(seconds=60))
store = dist.distributed_c10d._get_default_store()
if rank == 0:
    # In flight at exit with its Work dropped: only the worker holds it (and its tensor).
    dist.all_reduce(torch.ones(1 << 16), async_op=True)
    store.set("exiting", "1")
else:
    store.wait(["exiting"])
    if peer_joins:  # joins while rank 0 is already exiting
        t = torch.ones(1 << 16)
        dist.all_reduce(t)
        assert t[0].item() == 2.0
    else:
        time.sleep(0.5)
"""


def _exit_mid_collective(peer_joins: bool):
    import subprocess
    import sys

    from dist_helpers import free_port

    port = str(free_port())
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _EXIT_MID_COLLECTIVE, str(r), port, str(int(peer_joins))],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=50)[0] for p in procs]
    return time.monotonic() - start, [p.returncode for p in procs], outs


def test_exit_with_a_collective_in_flight_finishes_it_when_the_peer_joins():
    # The worker then drops the last reference to the Work while the interpreter
    # exits; before the exit hook that aborted the process (SIGABRT, rc 134).
    for _ in range(3):
        _, codes, outs = _exit_mid_collective(peer_joins=True)
        assert codes == [0, 0], outs


def test_exit_with_a_stuck_collective_is_prompt():
    elapsed, codes, outs = _exit_mid_collective(peer_joins=False)
    assert elapsed < 30, outs  # not the 60 s group timeout: aborted after a 2 s grace
    assert codes[0] == 0, outs[0][-3000:]


_EXIT_WITH_A_THREAD_IN_A_CALL = """
import sys, threading, time
from datetime import timedelta
import torch, torch.distributed as dist
import pyscalecomm
rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("scalecomm", init_method="tcp://127.0.0.1:" + port, rank=rank, world_size=2,
                        timeout=timedelta(seconds=60))
store = dist.distributed_c10d._get_default_store()
if rank == 0:
    def calls():  # blocked in a collective rank 1 never joins, then calling on and on
        while True:
            try:
                dist.all_reduce(torch.ones(1 << 16))
            except Exception:
                pass
    threading.Thread(target=calls, daemon=True).start()
    time.sleep(0.5)
    store.set("exiting", "1")
    print("main thread exits", flush=True)
else:
    store.wait(["exiting"])
    time.sleep(3)  # alive, never joining, until rank 0 has exited
"""


def test_exit_with_a_daemon_thread_inside_a_collective_is_clean():
    # The exit aborts the thread's call; a thread that came back into the
    # finalizing interpreter was ended by a forced unwind: SIGABRT (-6), which
    # torchrun reports as a failed job.
    import subprocess
    import sys

    from dist_helpers import free_port

    for _ in range(2):
        port = str(free_port())
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _EXIT_WITH_A_THREAD_IN_A_CALL, str(r), port],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for r in range(2)
        ]
        outs = [p.communicate(timeout=60)[0] for p in procs]
        assert procs[0].returncode == 0, outs[0][-3000:]
        assert "main thread exits" in outs[0] and "terminate called" not in outs[0], outs[0][-3000:]


def _small_dev_shm(rank, n):
    import pyscalecomm

    try:
        dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(transport="shm"))
        shm = "no error"
    except Exception as e:  # noqa: BLE001 - the message is the result
        shm = f"{type(e).__name__}: {e}"
    g = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(transport="tcp"))
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t, group=g)
    return shm, t.tolist()


def test_a_full_dev_shm_raises_at_creation_and_tcp_still_works():
    """A 2 MiB /dev/shm (a private tmpfs in a mount namespace) cannot hold a
    2-rank segment (two 1 MiB rings and the windows: 2.5 MiB): group creation
    raises naming the remedies, instead of the
    SIGBUS that the first write to an unreserved page would raise."""
    import subprocess
    import sys

    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("needs unshare --mount (root)")
    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        f"import sys; sys.path.insert(0, {here!r}); from dist_helpers import run_ranks; import test_faults; "
        "print('RESULT', run_ranks(2, test_faults._small_dev_shm, init='gloo', timeout_s=60, "
        "expect_errors=True))"
    )
    script = f'mount -t tmpfs -o size=2m tmpfs /dev/shm && exec {sys.executable} -c "{code}"'
    out = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    result = [line for line in out.stdout.splitlines() if line.startswith("RESULT")]
    assert result, out.stdout + out.stderr
    assert result[0].count("cannot reserve") == 2, result[0]
    assert "SCALECOMM_TRANSPORT=tcp" in result[0], result[0]
    assert result[0].count("[3.0, 3.0, 3.0]") == 2, result[0]


def _fork_child_uses_and_exits(rank, n):
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)  # the group works before the fork
    child_saw = ""
    if rank == 0:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: try the parent's group, then exit as Python's atexit would
            import pyscalecomm

            os.close(r)
            try:
                dist.all_reduce(torch.ones(4))
                msg = "no error"
            except Exception as e:  # noqa: BLE001 - reported to the parent
                msg = f"{type(e).__name__}: {e}"
            pyscalecomm._C._shutdown_all_at_exit()  # what atexit runs at a normal exit
            os.write(w, msg.encode())
            os.close(w)
            os._exit(0)  # not sys.exit: the test harness would report the child as rank 0
        os.close(w)
        os.waitpid(pid, 0)
        child_saw = os.read(r, 4096).decode()
        os.close(r)
    dist.barrier()
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)  # the parent's links survived the child's exit
    return child_saw, t.tolist()


def test_a_forked_child_neither_uses_nor_closes_the_parents_group():
    out = run_ranks(2, _fork_child_uses_and_exits)
    child_saw = out[0][0]
    assert "this is a forked child" in child_saw and "spawn" in child_saw, child_saw
    assert out[0][1] == out[1][1] == [3.0] * 4


def _rank_2_skips_a_collective(rank, n):
    t = torch.ones(4)
    dist.all_reduce(t)  # seq 1: everyone
    if rank == 2:
        time.sleep(6)  # busy elsewhere while the others wait in seq 2
        return "slept"
    try:
        dist.all_reduce(t)
    except dist.DistBackendError as e:
        # Rank 0's process hosts the store the desync report goes through:
        # it stays until rank 1 has its report (under load rank 1 times out later).
        store = dist.distributed_c10d._get_default_store()
        store.set(f"reported/{rank}", "1")
        if rank == 0:
            store.wait(["reported/1"], timedelta(seconds=30))
        return str(e)
    return "no error"


def test_a_timeout_names_the_lagging_rank_and_the_dumps_merge(tmp_path):
    import subprocess
    import sys

    out = run_ranks(
        3,
        _rank_2_skips_a_collective,
        env={"SCALECOMM_TRACE_DIR": str(tmp_path)},
        group_timeout_s=2,
    )
    # The first to time out names the lagging rank; the other may see its
    # links close first (over tcp at once), which names where to look.
    report = "Desync report: rank(s) 2 lag: rank 2 is idle after seq 1 allreduce"
    assert report in out[0] or report in out[1], out
    for r in (0, 1):
        assert (
            report in out[r] or f"rank {1 - r} closed its" in out[r] and "see that rank's error" in out[r]
        ), out[r]
    assert out[2] == "slept"
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert dumps == [f"scalecomm-trace-0-rank{r}.json" for r in range(3)], dumps
    merged = subprocess.run(
        [sys.executable, "-m", "pyscalecomm.trace", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    assert "rank(s) 2 lag: rank 2 is idle after seq 1 allreduce" in merged, merged
    assert "failed" in merged and "done" in merged, merged


def _destroy_with_a_stuck_collective(rank, n):
    import pyscalecomm

    g = dist.new_group(
        backend="scalecomm", pg_options=pyscalecomm.Options(shutdown_grace=timedelta(seconds=1))
    )
    if rank == 1:
        time.sleep(6)  # alive, but never joins the allreduce
        return "idle"
    work = dist.all_reduce(torch.ones(4), group=g, async_op=True)
    start = time.monotonic()
    dist.destroy_process_group(g)
    took = time.monotonic() - start
    try:
        work.wait()
        outcome = "no error"
    except Exception as e:  # noqa: BLE001 - the message is the result
        outcome = str(e)
    return took, outcome


def test_destroying_a_group_with_a_stuck_collective_is_bounded_by_the_grace_period():
    out = run_ranks(2, _destroy_with_a_stuck_collective, group_timeout_s=60)
    took, outcome = out[0]
    assert took < 10, took  # the grace period (1 s), not the 60 s timeout
    assert "destroyed" in outcome and "grace period of 1000 ms" in outcome, outcome


def _train_on_after_a_failure(rank, n):
    """A group is poisoned by a timeout (rank 1 skips a collective); both
    processes then make a new group and keep training with DDP on it."""
    g = dist.new_group(backend="scalecomm", pg_options=pyscalecomm_options(timeout=timedelta(seconds=1)))
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(4), group=g)  # rank 1 never comes
        except dist.DistBackendError:
            pass
        try:
            dist.all_reduce(torch.ones(4), group=g)
            poisoned = "no error"
        except dist.DistBackendError as e:
            poisoned = str(e)
    else:
        time.sleep(2)
        poisoned = ""
    dist.destroy_process_group(g)
    fresh = dist.new_group(backend="scalecomm")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2), process_group=fresh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        opt.zero_grad()
        model(torch.full((4, 8), float(rank + step))).sum().backward()
        opt.step()
    return poisoned, [p.detach().flatten().tolist() for p in model.parameters()]


def pyscalecomm_options(**kw):
    import pyscalecomm

    return pyscalecomm.Options(**kw)


def test_the_same_processes_train_on_in_a_new_group_after_a_failure():
    out = run_ranks(2, _train_on_after_a_failure)
    assert "unusable after an earlier failure" in out[0][0], out[0][0]
    for a, b in zip(out[0][1], out[1][1], strict=True):
        assert a == b  # the replicas agree: the new group reduces correctly


def _shrink_after_a_rank_dies(rank, n):
    """Rank 2 dies; the survivors see the failure, read it from get_error(),
    shrink the default group to themselves and go on with correct results."""
    dist.all_reduce(torch.ones(4))  # everyone is connected
    if rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        dist.all_reduce(torch.ones(4))
        failed = "no error"
    except dist.DistBackendError as e:
        failed = str(e)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    error = backend.get_error()
    shrunk = dist.shrink_group([2])
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)  # on the new default group
    # torch labels a shrunk CPU group "gloo"; the backend doing the work is ours
    name = shrunk._get_backend(torch.device("cpu")).name()
    return failed, str(error), dist.get_world_size(), shrunk.size(), t.tolist(), name


def test_survivors_shrink_the_group_and_go_on():
    out = run_ranks(3, _shrink_after_a_rank_dies, group_timeout_s=30, expect_errors=True, allow_missing=(2,))
    for rank in (0, 1):
        failed, error, world, size, values, name = out[rank]
        assert "died" in failed or "closed" in failed, failed
        assert error.endswith("REMOTE_ERROR"), error
        assert (world, size) == (2, 2)
        assert values == [3.0] * 4  # 1 + 2: rank 2 is gone
        assert name == "scalecomm", name


def test_get_error_is_success_on_a_healthy_group_and_timeout_after_one():
    out = run_ranks(2, _error_kinds, group_timeout_s=60)
    assert out[0] == ("ErrorType.SUCCESS", "ErrorType.TIMEOUT"), out[0]


def _error_kinds(rank, n):
    g = dist.new_group(backend="scalecomm", pg_options=pyscalecomm_options(timeout=timedelta(seconds=1)))
    backend = g._get_backend(torch.device("cpu"))
    before = str(backend.get_error())
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(4), group=g)  # rank 1 never comes
        except dist.DistBackendError:
            pass
        after = str(backend.get_error())
    else:
        time.sleep(2)
        after = ""
    dist.destroy_process_group(g)
    return before, after


_RESTARTED_JOB = """
import os, signal, sys, torch, torch.distributed as dist
import pyscalecomm
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("scalecomm")
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
if attempt == 0 and rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)  # a rank dies: torchrun restarts the job
for _ in range(3):
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
with open(os.path.join(sys.argv[1], f"rank{rank}-attempt{attempt}"), "w") as f:
    f.write(repr(t.tolist()))
dist.destroy_process_group()
"""


def test_torchrun_max_restarts_brings_the_job_back_after_a_rank_is_killed(tmp_path):
    import subprocess
    import sys

    from dist_helpers import free_port

    script = tmp_path / "job.py"
    script.write_text(_RESTARTED_JOB)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1"]
    cmd += ["--master-port", str(free_port()), "--monitor-interval", "0.2", str(script), str(tmp_path)]
    drop = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["SCALECOMM_TIMEOUT_MS"] = "20000"
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    done = sorted(f.name for f in tmp_path.iterdir() if f.name.startswith("rank"))
    assert done == ["rank0-attempt1", "rank1-attempt1"], done  # attempt 0 never finished
    for name in done:
        assert (tmp_path / name).read_text() == repr([3.0] * 4)


_PID_NAMESPACE_JOB = """
import os, signal, sys, time, torch, torch.distributed as dist
import pyscalecomm
rank, victim = int(os.environ["RANK"]), int(sys.argv[1])
if rank == 1:
    time.sleep(1)  # rank 0's segment exists before rank 1 looks for stale ones
dist.init_process_group("scalecomm", timeout=__import__("datetime").timedelta(seconds=60))
for i in range(3):
    if rank == 0:
        time.sleep(0.3)  # rank 1 waits for rank 0 in every call: it checks that rank 0 lives
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    assert t.tolist() == [3.0] * 4, t
stats = dist.group.WORLD._get_backend(torch.device("cpu")).stats()
assert "allreduce:shared" in stats, stats  # SCALECOMM_ALGO=shared: the group exists only if all are on shm
print("ok", flush=True)
if rank == victim:
    os.kill(os.getpid(), signal.SIGKILL)
start = time.monotonic()
try:
    dist.all_reduce(torch.ones(4))
    print("no error", flush=True)
except dist.DistBackendError as e:
    print(f"raised after {time.monotonic() - start:.1f}s: {e}", flush=True)
"""


def _pid_namespaces_usable():
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    p = subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True)
    return p.returncode == 0


@pytest.mark.skipif(not _pid_namespaces_usable(), reason="needs root and unshare(1) for a PID namespace")
@pytest.mark.parametrize("victim", [0, 1])
def test_ranks_in_different_pid_namespaces_share_memory_and_notice_a_death(tmp_path, victim):
    """Rank 1 runs in its own PID namespace (a container with the host's IPC):
    no false "rank died", no removal of the other's segment, and a killed rank
    is noticed by its heartbeat within seconds, not at the 60 s timeout."""
    import subprocess
    import sys

    from dist_helpers import free_port

    script = tmp_path / "job.py"
    script.write_text(_PID_NAMESPACE_JOB)
    env = {k: v for k, v in os.environ.items()}
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"})
    env["SCALECOMM_ALGO"] = "shared"  # needs every rank on shared memory (auto may pick pairwise under load)
    env["SCALECOMM_TRANSPORT"] = "shm"  # (the suite also runs with tcp links)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = []
    for rank in (0, 1):
        cmd = [sys.executable, str(script), str(victim)]
        if rank == 1:  # under a shell, so that python is not the namespace's init (which SIGKILL spares)
            cmd = ["unshare", "-p", "-f", "--mount-proc", "sh", "-c", '"$@"; exit $?', "sh", *cmd]
        procs.append(
            subprocess.Popen(
                cmd, env={**env, "RANK": str(rank)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        outs.append((out, err))
    survivor = 1 - victim
    out, err = outs[survivor]
    assert out.startswith("ok\n"), out + err[-3000:]
    assert outs[victim][0] == "ok\n", outs[victim][0] + outs[victim][1][-3000:]
    line = out.splitlines()[1]
    assert line.startswith("raised after"), out + err[-3000:]
    assert float(line.split()[2].rstrip("s:")) < 15, line
    assert f"rank {victim}" in line and "died" in line, line


_STORE_DIES_JOB = """
import os, sys, time
from datetime import timedelta
import torch.distributed as dist
from pyscalecomm import _C
rank, port = int(sys.argv[1]), int(sys.argv[2])
store = dist.TCPStore("127.0.0.1", port, 3, rank == 0, timeout=timedelta(seconds=60))
if rank == 2:
    time.sleep(60)  # never joins: ranks 0 and 1 wait in the rendezvous
config = _C.BackendConfig()
config.timeout_ms = 60000
print("waiting", flush=True)
start = time.monotonic()
try:
    _C.ScalecommBackend(store, rank, 3, config)
    print("no error", flush=True)
except Exception as e:
    print(f"raised after {time.monotonic() - start:.1f}s: {type(e).__name__}: {e}", flush=True)
"""


def test_the_store_dying_during_rendezvous_fails_within_seconds(tmp_path):
    """Rank 0 (which hosts the TCPStore, as with env://) is killed while rank 1
    waits in the rendezvous for rank 2: rank 1 raises at once, not at the 60 s timeout."""
    import subprocess
    import sys

    from dist_helpers import free_port

    script = tmp_path / "job.py"
    script.write_text(_STORE_DIES_JOB)
    port = str(free_port())
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), port],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(3)
    ]
    try:
        assert procs[1].stdout.readline() == "waiting\n"
        assert procs[0].stdout.readline() == "waiting\n"
        time.sleep(1)
        procs[0].kill()
        out, err = procs[1].communicate(timeout=45)
    finally:
        for p in procs:
            p.kill()
            p.communicate()
    assert out.startswith("raised after"), out + err[-3000:]
    assert float(out.split()[2].rstrip("s:")) < 10, out
    assert "DistNetworkError" in out or "DistBackendError" in out, out
    assert "scalecomm rendezvous (rank 1 of 3" in out and "the store cannot be reached" in out, out
