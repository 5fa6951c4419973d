#!/usr/bin/env bash
# Everything a GPU machine can answer, in one go, into one report:
#   bash scripts/gpu_check.sh [report-dir]      (default: gpu-report/)
# 1. the machine (nvidia-smi, torch, NCCL, this build);
# 2. the GPU test suite (pytest -m gpu): kernels against the CPU reference,
#    every collective x algorithm x dtype over NCCL, stream semantics, timeouts,
#    DDP on 2 GPUs against NCCL, the bench table against ProcessGroupNCCL;
# 3. the bench: our schedules over NCCL, NCCL's own collective inside scalecomm
#    and stock ProcessGroupNCCL, side by side (2 GPUs); host staging chunked
#    (copies overlapped with the collective) against whole-tensor copies;
# 4. the training driver against NCCL (2 GPUs).
# Each step's output goes to its own file; report.md says which passed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-report}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
REPORT="$OUT/report.md"
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
{
  echo "# scalecomm GPU check ($(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null))"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | head -9
  "$PY" -c "import torch, pyscalecomm; from pyscalecomm import _C; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None, '| scalecomm built with cuda', _C.built_with_cuda, 'nccl', _C.built_with_nccl)" 2>&1
  echo '```'
  echo
  echo "| step | result | output |"
  echo "| --- | --- | --- |"
} > "$REPORT"

step() {  # step NAME COMMAND...: runs it, records pass/fail and where its output went
  local name=$1
  shift
  local log="$OUT/$name.txt"
  echo "== $name: $*"
  if "$@" > "$log" 2>&1; then
    echo "| $name | pass | $name.txt |" >> "$REPORT"
  else
    echo "| $name | **FAIL** (exit $?) | $name.txt |" >> "$REPORT"
  fi
  tail -3 "$log"
}

step gpu-tests "$PY" -m pytest -m gpu -v tests
if [ "$GPUS" -ge 2 ]; then
  step bench-allreduce "$PY" -m pyscalecomm.bench --nproc 2 --device cuda --algos ring,rhd,tree,nccl --baselines nccl \
    -b 8K -e 256M -f 4 --json "$OUT/bench-allreduce.jsonl"
  step bench-every-collective "$PY" -m pyscalecomm.bench --nproc 2 --device cuda --collectives all --baselines nccl \
    -b 8K -e 64M -f 8 --json "$OUT/bench-every-collective.jsonl"
  # Host staging (the fallback without NCCL): chunked and overlapped (default) against whole-tensor copies.
  step bench-host-staged-chunked env SCALECOMM_CUDA_TRANSPORT=host "$PY" -m pyscalecomm.bench --nproc 2 --device cuda \
    --algos ring -b 1M -e 256M -f 4 --json "$OUT/bench-host-staged-chunked.jsonl"
  step bench-host-staged-whole env SCALECOMM_CUDA_TRANSPORT=host SCALECOMM_STAGE_CHUNK_BYTES=1099511627776 "$PY" \
    -m pyscalecomm.bench --nproc 2 --device cuda --algos ring -b 1M -e 256M -f 4 \
    --json "$OUT/bench-host-staged-whole.jsonl"
  step train-vs-nccl "$PY" -m pyscalecomm.train --device cuda --sweep world=2 backend=nccl,scalecomm --epochs 2 \
    --out "$OUT/train"
else
  echo "| bench, training | skipped: needs 2 GPUs (found $GPUS) | |" >> "$REPORT"
fi
echo
cat "$REPORT"
