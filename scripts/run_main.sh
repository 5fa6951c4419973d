#!/usr/bin/env bash
# The main job on one machine: set up, then DDP on scikit-learn's digits (an
# MLP of 1.1 M parameters) in the two regimes where scalecomm pays off, each
# table followed by its result in one line per run:
#   1. one host: 1 and 2 ranks over shared memory, gloo vs scalecomm, three
#      repeats round-robin (medians and their spread);
#   2. two hosts on 1 Gbit/s links (an emulated cluster: network namespaces,
#      needs root): gloo vs scalecomm, uncompressed and with top-k 1 %
#      compression (error feedback), trained long enough to reach gloo's
#      accuracy, so "sooner" is the time to the same accuracy.
# Results and plots go to results/main/{one-host,slow-links}/. Extra
# arguments go to both runs (e.g. --epochs 2 for a quicker look).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
COMMON=(--model mlp --width 1024 --batch-size 16)

echo "## One host, shared memory: scalecomm against gloo"
"$PY" -m pyscalecomm.train --out-dir results/main/one-host \
  --sweep world=1,2 backend=gloo,scalecomm --epochs 3 --repeat 3 "${COMMON[@]}" "$@"

echo
if [ "$(id -u)" != 0 ] || [ "${SCALECOMM_NO_CLUSTER:-0}" = 1 ]; then
  echo "## Two hosts on 1 Gbit/s links: skipped (the emulated cluster needs root)"
  exit 0
fi
echo "## Two hosts on 1 Gbit/s links (emulated): compression against gloo"
"$PY" -m pyscalecomm.train --cluster-rate 1gbit --out-dir results/main/slow-links \
  --sweep world=2 backend/compress=gloo/none,scalecomm/none,scalecomm/topk:0.01 \
  --epochs 10 "${COMMON[@]}" "$@"
