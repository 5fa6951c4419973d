#!/usr/bin/env bash
# Installs what scalecomm needs on a fresh machine and builds it in place
# (editable install). Safe to run again; a rebuild is incremental.
#   TORCH_SPEC=torch==2.13.0 bash scripts/setup.sh   # e.g. the CPU-only build
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
# Until the install below is done, an older scalecomm install (say, an
# editable one whose folder moved) must not stop `import torch`.
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
export PIP_ROOT_USER_ACTION=ignore  # no "running pip as root" warning in the job's output
TORCH_SPEC=${TORCH_SPEC:-torch==2.14.1}

if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install --quiet "$TORCH_SPEC"
fi
"$PY" -m pip install --quiet numpy pytest scikit-learn ninja expecttest ruff clang-format setuptools wheel matplotlib hypothesis
# torchft (optional for users): its own tests run with pyscalecomm.torchft (tests/test_torchft.py)
"$PY" -m pip install --quiet torchft==0.2.0 parameterized
# mpi4py: rendezvous under mpirun (needs an MPI, e.g. apt-get install libopenmpi-dev; skipped without one)
if command -v mpicc >/dev/null 2>&1; then "$PY" -m pip install --quiet mpi4py; fi

# The nvcc on PATH may be a wrapper: point torch at the toolkit root explicitly.
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDA_HOME=/usr/local/cuda
fi
# Installed from this checkout with the current metadata (version, entry
# points): rebuild in place, incrementally (seconds); otherwise (re)install,
# which builds from scratch (minutes).
if "$PY" -I scripts/installed_here.py; then
  mkdir -p build
  "$PY" setup.py --quiet build_ext --inplace > build/setup-build.log 2>&1 || {
    tail -40 build/setup-build.log
    exit 1
  }
else
  "$PY" -m pip install --quiet --no-build-isolation -e .
fi
TORCH_DEVICE_BACKEND_AUTOLOAD=1 "$PY" -c "import pyscalecomm, torch; print(f'scalecomm {pyscalecomm.__version__} built for torch {torch.__version__} (CUDA sources: {pyscalecomm._C.built_with_cuda})')"
