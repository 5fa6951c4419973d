#!/usr/bin/env bash
# The fast tests against another torch release (default: 2.13.0, the CPU-only
# build), in a virtual environment and a copy of the sources, so the main
# build (against the torch of scripts/setup.sh) is left alone:
#   bash scripts/torch_compat.sh                  # torch 2.13.0
#   TORCH_SPEC=torch==2.14.1 bash scripts/torch_compat.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TAG=$(echo "$TORCH_SPEC" | tr -c 'a-zA-Z0-9.\n' '-')
VENV="$ROOT/build/compat-$TAG/venv"
SRC="$ROOT/build/compat-$TAG/src"

"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet "$TORCH_SPEC" numpy pytest hypothesis ninja setuptools wheel
rm -rf "$SRC" && mkdir -p "$SRC"
git ls-files -z | xargs -0 tar -cf - | tar -xf - -C "$SRC"
cd "$SRC"
# -O1 -g0: this stage checks the API against another torch, not speed; it builds in half the time.
SCALECOMM_CUDA=0 SCALECOMM_CXXFLAGS="${SCALECOMM_CXXFLAGS:--O1 -g0}" "$VENV/bin/python" setup.py build_ext --inplace >build.log 2>&1 || { tail -50 build.log; exit 1; }
"$VENV/bin/python" -c "import pyscalecomm, torch; print('scalecomm', pyscalecomm.__version__, 'on torch', torch.__version__)"
# The core collectives against gloo, the direct API, the group's stats, registration, faults' first cases.
PYTHONPATH="$SRC" "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/test_collectives.py tests/test_direct.py tests/test_stats.py \
  "tests/test_faults.py::test_rank_killed_mid_allreduce_raises_on_every_survivor_quickly" \
  "tests/test_registration.py::test_the_entry_point_registers_only_a_name_and_the_import_completes_it" "$@"
