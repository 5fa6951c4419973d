"""What another process, or another user, on the same machine cannot do to a
group: pose as a rank over shared memory, read or write through the tuning
cache, or stall a rank with what it reads as settings."""

import os
import stat
from datetime import timedelta

import torch
import torch.distributed as dist
from dist_helpers import run_ranks


def _group_with_secret(rank, n, transport, secrets):
    import pyscalecomm

    os.environ["SCALECOMM_SECRET"] = secrets[rank]
    options = pyscalecomm.Options(
        transport=transport, timeout=timedelta(seconds=3 if transport == "tcp" else 5)
    )
    try:
        g = dist.new_group(backend="scalecomm", pg_options=options)
    except Exception as e:  # noqa: BLE001 - the message is the result
        return f"{type(e).__name__}: {e}"
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t, group=g)
    return t.tolist()


def test_tcp_peers_must_share_the_secret():
    assert run_ranks(2, _group_with_secret, "tcp", ["s3cret", "s3cret"]) == [[3.0] * 5] * 2
    out = run_ranks(2, _group_with_secret, "tcp", ["s3cret", "guess"])
    assert "could not connect to rank 0" in out[1], out[1]
    assert "timed out" in out[0], out[0]


def test_shm_peers_must_prove_the_secret_as_tcp_peers_do():
    # A process that can write the store but does not know SCALECOMM_SECRET
    # (here: a rank with another secret) must not become a rank over shared
    # memory any more than over TCP.
    assert run_ranks(2, _group_with_secret, "shm", ["s3cret", "s3cret"]) == [[3.0] * 5] * 2
    out = run_ranks(2, _group_with_secret, "shm", ["s3cret", "guess"])
    for r in range(2):
        assert "does not prove the group's key" in out[r] and f"rank {1 - r}" in out[r], out[r]


def _cache_path_and_allreduce(rank, n):
    import pyscalecomm

    g = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(algorithm="auto"))
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t, group=g)
    be = g._get_backend(torch.device("cpu"))
    return be.tuning_file, t[0].item()


def test_without_home_the_tuning_cache_is_never_in_a_shared_directory(tmp_path):
    # No HOME and no XDG_CACHE_HOME: the user's home from the password
    # database, never a path every user shares (such as /tmp/.cache).
    env = {"HOME": None, "XDG_CACHE_HOME": None, "SCALECOMM_TUNING_FILE": None}
    out = run_ranks(2, _cache_path_and_allreduce, env=env)
    import pwd

    home = pwd.getpwuid(os.geteuid()).pw_dir
    for path, value in out:
        assert value == 3.0
        assert path.startswith(os.path.join(home, ".cache", "scalecomm") + "/"), path
        assert not path.startswith("/tmp"), path


def _is_cache(path):
    try:
        with open(path) as f:
            return f.read().startswith("# scalecomm tuning cache")
    except OSError:
        return False


def _plant_and_create(rank, n, cache_dir, victim, text):
    """Rank 0 plants `text` (or, when None, symlinks from every name the cache
    is written through) at this layout's cache path, then a group is made."""
    import pyscalecomm

    first = dist.new_group(backend="scalecomm", pg_options=pyscalecomm.Options(algorithm="auto"))
    path = first._get_backend(torch.device("cpu")).tuning_file
    dist.destroy_process_group(first)
    if rank == 0:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)
        if text is None:
            for pid in range(os.getpid(), os.getpid() + 50):  # the old temporary names: <path>.tmp<pid>
                os.symlink(victim, f"{path}.tmp{pid}")
            os.symlink(victim, path)
        else:
            with open(path, "w") as f:
                f.write(text)
    dist.barrier()
    g = dist.new_group(
        backend="scalecomm", pg_options=pyscalecomm.Options(algorithm="auto", auto_explore_percent=100)
    )
    # Until auto has decided and rank 0 has written the cache (a few hundred
    # calls on a quiet machine; more on a loaded one), at most 20000.
    written = torch.zeros(1)
    for _ in range(200):
        for _ in range(100):
            dist.all_reduce(torch.ones(256), group=g)
        if rank == 0:
            written[0] = float(not os.path.islink(path) and _is_cache(path))
        dist.broadcast(written, src=0, group=g)
        if written[0] == 1:
            break
    dist.destroy_process_group(g)
    return path


def test_a_planted_cache_file_or_symlink_is_neither_trusted_nor_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "SCALECOMM_TUNING_FILE": None}
    # Garbage where the cache goes: ignored (and replaced), not a failure at init.
    path = run_ranks(
        2, _plant_and_create, str(tmp_path), str(victim), "garbage that is not a cache\n", env=env
    )[0]
    assert open(path).read().startswith("# scalecomm tuning cache"), open(path).read()
    # Symlinks at the cache's name and at any temporary name it is written through.
    path = run_ranks(2, _plant_and_create, str(tmp_path), str(victim), None, env=env)[0]
    assert victim.read_text() == "precious\n"
    assert not os.path.islink(path) and open(path).read().startswith("# scalecomm tuning cache")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def _never_reached(rank, n):
    return "the group was made"


def test_a_tuning_file_that_is_not_a_small_regular_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it to read would block until a writer comes
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(64 << 20)  # /dev/zero's kind of input, bounded
    for path, why in ((fifo, "not a regular file"), ("/dev/zero", "not a regular file"), (big, "more than")):
        env = {"SCALECOMM_TUNING_FILE": str(path)}
        out = run_ranks(2, _never_reached, env=env, timeout_s=60, expect_errors=True)
        for r in range(2):  # init_process_group raises on every rank
            text = getattr(out[r], "text", str(out[r]))
            assert "ValueError" in text and f"SCALECOMM_TUNING_FILE '{path}' is not read" in text, text
            assert why in text, text
