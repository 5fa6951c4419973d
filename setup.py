"""Build of the scalecomm extension (pyscalecomm._C).

CUDA: built with CUDA support when torch has CUDA and a CUDA toolkit is found
(CUDA_HOME), unless SCALECOMM_CUDA=0. SCALECOMM_CUDA=1 makes a missing toolkit
an error instead of a CPU-only build.
"""

import glob
import os

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _sources(pattern: str) -> list[str]:
    files = sorted(glob.glob(os.path.join("csrc", "**", pattern), recursive=True))
    return [f for f in files if os.sep + "cuda" + os.sep not in f]


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


def _extensions():
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    sources = _sources("*.cc")
    define_macros = []
    cxx_flags = ["-O3", "-fvisibility=hidden", "-Wall", "-Wno-unused-function", "-Wno-sign-compare"]
    if _cuda_wanted():
        cuda_sources = sorted(glob.glob(os.path.join("csrc", "**", "cuda", "*.cu"), recursive=True))
        define_macros.append(("SCALECOMM_WITH_CUDA", "1"))
        return [
            CUDAExtension(
                "pyscalecomm._C",
                sources + cuda_sources,
                include_dirs=[os.path.join(ROOT, "csrc")],
                define_macros=define_macros,
                extra_compile_args={"cxx": cxx_flags, "nvcc": ["-O3"]},
            )
        ]
    return [
        CppExtension(
            "pyscalecomm._C",
            sources,
            include_dirs=[os.path.join(ROOT, "csrc")],
            define_macros=define_macros,
            extra_compile_args={"cxx": cxx_flags},
        )
    ]


def _build_ext():
    from torch.utils.cpp_extension import BuildExtension

    return BuildExtension.with_options(use_ninja=True)


setup(
    name="scalecomm",
    version="0.1.0",
    packages=find_packages(include=["pyscalecomm", "pyscalecomm.*"]),
    ext_modules=_extensions(),
    cmdclass={"build_ext": _build_ext()},
    python_requires=">=3.10",
)
