"""Build of the scalecomm extension (pyscalecomm._C).

CUDA: built with CUDA support when torch has CUDA and a CUDA toolkit is found
(CUDA_HOME), unless SCALECOMM_CUDA=0. SCALECOMM_CUDA=1 makes a missing toolkit
an error instead of a CPU-only build.

MPI: built with MPI (the mpi transport and the `mpi` algorithm) when an MPI
compiler wrapper (mpicc from Open MPI or MPICH; MPICC names another) reports
its flags, unless SCALECOMM_MPI=0. SCALECOMM_MPI=1 makes a missing MPI an error.

NCCL (CUDA builds): the nvidia-nccl wheel that CUDA builds of torch depend on
(or SCALECOMM_NCCL_HOME with include/nccl.h and lib/libnccl.so*) gives the
NCCL transport and the `nccl` algorithm; without it CUDA tensors are staged
through host memory only.
"""

import glob
import os
import shlex
import shutil
import subprocess

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))
# The build imports torch; torch imports installed backends (a previous
# scalecomm install among them), and one whose sources were moved would fail
# that import: the build never needs them, and reinstalling must heal that.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"


_DEVICE_DIRS = (os.sep + "cuda" + os.sep, os.sep + "nccl" + os.sep)


def _sources(pattern: str) -> list[str]:
    """Host sources: everything but the CUDA folders and the NCCL transport."""
    files = sorted(glob.glob(os.path.join("csrc", "**", pattern), recursive=True))
    return [f for f in files if not any(d in f for d in _DEVICE_DIRS)]


def _cuda_wanted() -> bool:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    mode = os.environ.get("SCALECOMM_CUDA", "auto").lower()
    if mode in ("0", "off", "false", "no"):
        return False
    available = torch.version.cuda is not None and CUDA_HOME is not None
    if mode in ("1", "on", "true", "yes") and not available:
        raise RuntimeError(
            "SCALECOMM_CUDA=1 but torch has no CUDA or no CUDA toolkit was found; "
            "install a CUDA build of torch and set CUDA_HOME to the toolkit root"
        )
    return available


def _mpi_flags():
    """Compile and link flags of the MPI found by its compiler wrapper, or None."""
    mode = os.environ.get("SCALECOMM_MPI", "auto").lower()
    if mode in ("0", "off", "false", "no"):
        return None
    wrapper = shutil.which(os.environ.get("MPICC", "mpicc"))
    flags = None
    if wrapper:
        for compile_q, link_q in (("--showme:compile", "--showme:link"), ("-compile_info", "-link_info")):
            try:
                comp = subprocess.run([wrapper, compile_q], capture_output=True, text=True, check=True).stdout
                link = subprocess.run([wrapper, link_q], capture_output=True, text=True, check=True).stdout
            except (OSError, subprocess.CalledProcessError):
                continue
            words = shlex.split(comp) + shlex.split(link)
            if compile_q == "-compile_info":  # MPICH prints the compiler first
                words = [w for w in words if w.startswith("-")]
            flags = {
                "include_dirs": [w[2:] for w in words if w.startswith("-I")],
                "library_dirs": [w[2:] for w in words if w.startswith("-L")],
                "libraries": [w[2:] for w in words if w.startswith("-l")],
            }
            flags["extra_link_args"] = [f"-Wl,-rpath,{d}" for d in flags["library_dirs"]]
            break
    if flags is None and mode in ("1", "on", "true", "yes"):
        raise RuntimeError(
            "SCALECOMM_MPI=1 but no MPI compiler wrapper (mpicc) answered; install libopenmpi-dev"
        )
    return flags


def _nccl_flags():
    """Include and link flags of NCCL, or None."""
    roots = [os.environ["SCALECOMM_NCCL_HOME"]] if os.environ.get("SCALECOMM_NCCL_HOME") else []
    try:
        import nvidia.nccl

        roots += list(nvidia.nccl.__path__)
    except ImportError:
        pass
    for root in roots:
        libs = sorted(glob.glob(os.path.join(root, "lib", "libnccl.so*")))
        if os.path.exists(os.path.join(root, "include", "nccl.h")) and libs:
            lib_dir = os.path.join(root, "lib")
            return {
                "include_dirs": [os.path.join(root, "include")],
                "extra_link_args": [
                    f"-L{lib_dir}",
                    f"-l:{os.path.basename(libs[0])}",
                    f"-Wl,-rpath,{lib_dir}",
                ],
            }
    return None


def _write_build_info(cuda: bool) -> None:
    """pyscalecomm/_build_info.py: the torch the extension is built against,
    so `import pyscalecomm` can name a mismatch instead of failing on a symbol,
    and whether it was built with CUDA (what `_C.built_with_cuda` must say)."""
    import torch

    with open(os.path.join(ROOT, "pyscalecomm", "_build_info.py"), "w") as f:
        f.write(f'"""Written by setup.py at build time."""\n\nTORCH_VERSION = "{torch.__version__}"\n')
        f.write(f"CUDA = {cuda}\n")


def _extensions():
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    cuda = _cuda_wanted()
    _write_build_info(cuda)
    sources = _sources("*.cc")
    define_macros = []
    # -fno-trapping-math: nothing here enables floating-point traps, and without
    # it GCC keeps the fp16 conversions' selects as branches, which stops the
    # reduction loops from vectorising (results are unchanged: not fast-math).
    # -ffp-contract=off: no multiply-add fused on FMA targets (aarch64), so
    # products and sums round as on x86-64 (the codecs' same-bits contracts).
    # -g1: line tables (backtraces name file and line); full -g nearly doubles
    # the compile time of the files that include torch's headers.
    # SCALECOMM_CXXFLAGS adds the builder's own (later flags win: "-O1 -g0").
    cxx_flags = [
        "-O3",
        "-g1",
        "-fno-trapping-math",
        "-ffp-contract=off",
        "-fvisibility=hidden",
        "-Wall",
        "-Wno-unused-function",
        "-Wno-sign-compare",
    ]
    cxx_flags += os.environ.get("SCALECOMM_CXXFLAGS", "").split()
    mpi = _mpi_flags() or {}
    if mpi:
        define_macros.append(("SCALECOMM_WITH_MPI", "1"))
    extra = {
        "include_dirs": [os.path.join(ROOT, "csrc")] + mpi.get("include_dirs", []),
        "library_dirs": mpi.get("library_dirs", []),
        "libraries": mpi.get("libraries", []),
        "extra_link_args": mpi.get("extra_link_args", []),
    }
    if cuda:
        # sm_80 (A100) and sm_90 (H100) machine code plus sm_90 PTX for newer GPUs,
        # unless the builder names its own list.
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")
        cuda_sources = []
        for pattern in ("*.cu", "*.cc"):
            cuda_sources += sorted(glob.glob(os.path.join("csrc", "**", "cuda", pattern), recursive=True))
        define_macros.append(("SCALECOMM_WITH_CUDA", "1"))
        nccl = _nccl_flags()
        if nccl:
            define_macros.append(("SCALECOMM_WITH_NCCL", "1"))
            extra["include_dirs"] += nccl["include_dirs"]
            extra["extra_link_args"] += nccl["extra_link_args"]
            cuda_sources += sorted(glob.glob(os.path.join("csrc", "*", "nccl", "*.cc")))
        return [
            CUDAExtension(
                "pyscalecomm._C",
                sources + cuda_sources,
                define_macros=define_macros,
                extra_compile_args={
                    "cxx": cxx_flags,
                    "nvcc": ["-O3", "-std=c++17", "--expt-relaxed-constexpr"],
                },
                **extra,
            )
        ]
    return [
        CppExtension(
            "pyscalecomm._C",
            sources,
            define_macros=define_macros,
            extra_compile_args={"cxx": cxx_flags},
            **extra,
        )
    ]


def _build_ext():
    from torch.utils.cpp_extension import BuildExtension

    class Build(BuildExtension):
        def build_extensions(self):
            super().build_extensions()
            for ext in self.extensions:
                _check_shared_libstdcxx(self.get_ext_fullpath(ext.name))

    return Build.with_options(use_ninja=True)


def _check_shared_libstdcxx(path: str) -> None:
    """The extension must use the process's libstdc++ (torch's). A compiler that
    links libstdc++ statically (some wrappers do) gives the extension a second
    copy whose locale is never set up: numbers format as nothing or crash."""
    with open(path, "rb") as f:
        if b"libstdc++.so.6" in f.read():
            return
    os.remove(path)
    raise RuntimeError(
        f"{path} was linked with a static libstdc++ (compiler: {os.environ.get('CXX', 'c++')}); "
        "inside torch's process it would crash at the first number it formats. Build with the system "
        "compiler (e.g. CXX=/usr/bin/g++ CC=/usr/bin/gcc) or one that links libstdc++ as a shared library."
    )


setup(
    name="scalecomm",
    version="0.1.0",
    packages=find_packages(include=["pyscalecomm", "pyscalecomm.*"]),
    ext_modules=_extensions(),
    cmdclass={"build_ext": _build_ext()},
    python_requires=">=3.10",
)
