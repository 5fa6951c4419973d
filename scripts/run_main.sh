#!/usr/bin/env bash
# The main job on one machine: set up, then a short training sweep (1 and 2
# ranks; gloo, scalecomm, scalecomm + top-k 1 %) with DDP on scikit-learn's
# digits, printing the table and writing the plots into results/main/.
# As root the ranks run on an emulated cluster (network namespaces on
# 1 Gbit/s links), where communication costs what it costs between hosts;
# otherwise they run as local processes (shared memory).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
CLUSTER=()
if [ "$(id -u)" = 0 ] && [ "${SCALECOMM_NO_CLUSTER:-0}" != 1 ]; then
  CLUSTER=(--cluster-rate 1gbit)
fi
"$PY" -m pyscalecomm.train "${CLUSTER[@]}" --out results/main \
  --sweep world=1,2 backend=gloo,scalecomm compress=none,topk:0.01 \
  --model mlp --width 1024 --epochs 6 --batch-size 16 "$@"
