"""Registration without `import pyscalecomm`: the torch.backends entry point
names the backend during `import torch`; the extension loads with the first
group; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns it off."""

import importlib.metadata
import os
import subprocess
import sys

import pytest
from dist_helpers import free_port

_SCRIPT = """
import sys, torch, torch.distributed as dist
print("loaded at import:", "pyscalecomm" in sys.modules)
dist.init_process_group("scalecomm", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
t = torch.ones(3)
dist.all_reduce(t)
print(dist.get_backend(), "pyscalecomm" in sys.modules, t.tolist())
dist.destroy_process_group()
"""


def _run(**env):
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(port=free_port())],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _installed() -> bool:
    return any(e.name == "scalecomm" for e in importlib.metadata.entry_points(group="torch.backends"))


@pytest.mark.skipif(not _installed(), reason="scalecomm is not installed (pip install -e .): no entry point")
def test_the_extension_says_whether_it_was_built_with_cuda_as_setup_py_built_it():
    # A wrong flag skips every GPU kernel test and refuses the kernel bench on a GPU.
    import pyscalecomm
    from pyscalecomm import _C, _build_info

    assert isinstance(_C.built_with_cuda, bool)
    assert _C.built_with_cuda == _build_info.CUDA
    assert pyscalecomm.built_with_cuda() == _build_info.CUDA


def test_init_process_group_finds_the_backend_without_importing_pyscalecomm():
    out = _run()
    assert out.returncode == 0, out.stderr
    assert "loaded at import: False" in out.stdout  # `import torch` does not load the extension
    assert "scalecomm True [1.0, 1.0, 1.0]" in out.stdout, out.stdout


@pytest.mark.skipif(not _installed(), reason="scalecomm is not installed (pip install -e .): no entry point")
def test_torch_s_autoload_switch_turns_it_off():
    out = _run(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out.returncode != 0
    assert "scalecomm" in out.stderr and "nknown backend" in out.stderr, out.stderr[-2000:]


def test_the_entry_point_registers_only_a_name_and_the_import_completes_it():
    # Without the installed metadata: call the entry point as torch would.
    script = (
        "import sys, torch, torch.distributed as dist, pyscalecomm_autoload\n"
        "pyscalecomm_autoload.register(); pyscalecomm_autoload.register()\n"
        "print('SCALECOMM' in dist.Backend._plugins, 'pyscalecomm' in sys.modules)\n"
        f"dist.init_process_group('scalecomm', init_method='tcp://127.0.0.1:{free_port()}',"
        " rank=0, world_size=1)\n"
        "t = torch.ones(2); dist.all_reduce(t); print(t.tolist()); dist.destroy_process_group()\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["True False", "[1.0, 1.0]"], out.stdout


def test_the_build_runs_where_a_moved_install_breaks_import_torch(tmp_path):
    # An editable install whose checkout moved leaves an entry point to a
    # module that is gone: `import torch` then fails, and reinstalling must
    # still work (setup.py imports torch), or nothing could heal it.
    dist_info = tmp_path / "gone-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: gone\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[torch.backends]\ngone = no_such_module:register\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SCALECOMM_MPI": "0"}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    broken = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert "Failed to load the backend extension: gone" in broken.stderr  # the failure is real
    build = subprocess.run(
        [sys.executable, "setup.py", "--version"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stderr


_THREADS_SCRIPT = """
import threading, time
import torch.distributed as dist
from pyscalecomm import _C
from pyscalecomm._registration import backend_config

stop = time.monotonic() + {seconds}
def make():
    n = 0
    while time.monotonic() < stop:
        name = f"g{{threading.get_ident()}}_{{n}}"
        b = _C.ScalecommBackend(dist.HashStore(), 0, 1, backend_config(None, None, name))
        b.shutdown()
        del b
        n += 1
def churn():  # other threads' Python objects of the extension, made and freed
    while time.monotonic() < stop:
        xs = [_C.BackendConfig() for _ in range(200)]
        del xs
threads = [threading.Thread(target=f) for f in (make, make, make, churn, churn)]
for t in threads: t.start()
for t in threads: t.join()
print("survived")
"""


def test_groups_made_on_several_threads_beside_other_python_threads_do_not_corrupt_the_interpreter():
    """Groups are built without the GIL (their rendezvous blocks), but the
    Python object that wraps each one must be registered with it: torchft's
    tests (ranks as threads) and any job that makes groups from a thread
    otherwise abort in garbage collection ("Tried to deallocate unregistered
    instance")."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run(
        [sys.executable, "-c", _THREADS_SCRIPT.format(seconds=6)],
        env={**os.environ, "PYTHONPATH": root},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 and "survived" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
