#!/usr/bin/env bash
# The main job on one machine: set up, then a 2-rank DDP training comparison
# (scalecomm vs gloo) and the allreduce table against gloo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
"$PY" -m pyscalecomm.train_compare --nproc 2
"$PY" -m pyscalecomm.bench --nproc 2 -b 8 -e 64M -f 8
