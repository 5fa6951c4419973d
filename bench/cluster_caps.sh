#!/usr/bin/env bash
# Emulated cluster measurements recorded in docs/performance.md (needs root).
#  1. busbw against the link cap: 2 hosts x 1 rank, caps 500 Mbit/s to 25 Gbit/s.
#  2. algorithms when the network is slow and shared memory fast: 2 hosts x 2 ranks, 1 Gbit/s.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
LOG=${LOG:-/tmp/scalecomm-cluster}
mkdir -p "$LOG"
for rate in 500mbit 1gbit 2gbit 5gbit 10gbit 25gbit; do
  echo "## cap $rate per host and direction, 2 hosts x 1 rank"
  python -m pyscalecomm.cluster --hosts 2 --rate "$rate" --logdir "$LOG" --timeout 300 -- \
    python -m pyscalecomm.bench -b 16M -e 64M -f 4 -n 5 -w 1 --baselines gloo --json "$LOG/caps.jsonl"
done
echo "## 2 hosts x 2 ranks, 1gbit"
python -m pyscalecomm.cluster --hosts 2 --ranks-per-host 2 --rate 1gbit --logdir "$LOG" --timeout 600 -- \
  python -m pyscalecomm.bench -b 64K -e 64M -f 8 -n 5 -w 1 --algos ring,rhd,tree,direct,hier,auto \
  --baselines gloo --rounds 2 --json "$LOG/algos.jsonl"
