#!/usr/bin/env bash
# The allreduce measurement recorded in docs/performance.md: 2 ranks on one
# host (shared memory), scalecomm and gloo in the same run, JSON lines kept in
# results/. Usage: bash bench/allreduce_vs_gloo.sh [NPROC]
set -euo pipefail
cd "$(dirname "$0")/.."
NPROC=${1:-2}
mkdir -p results
stamp=$(date +%Y%m%d-%H%M%S)
python3 -m pyscalecomm.bench --nproc "$NPROC" -b 8 -e 8 -n 2000 -w 100 --json "results/latency-$stamp.jsonl"
python3 -m pyscalecomm.bench --nproc "$NPROC" -b 1M -e 256M -f 2 --json "results/bandwidth-$stamp.jsonl"
