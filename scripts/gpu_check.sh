#!/usr/bin/env bash
# Everything a GPU machine can answer, in one go, into one report:
#   bash scripts/gpu_check.sh [report-dir]      (default: gpu-report/)
# 1. the machine (nvidia-smi, torch, NCCL, this build);
# 2. the GPU test suite (pytest -m gpu): kernels against the CPU reference,
#    every collective x algorithm x dtype over NCCL, stream semantics, timeouts,
#    DDP, the bench table against ProcessGroupNCCL. On one GPU the NCCL tests run
#    two ranks on it (SC_TEST_SHARE_GPU=1: NCCL's socket transport, see
#    tests/gpu/test_cuda_collectives.py);
# 3. the training driver against NCCL (2 GPUs) or gloo (one GPU, two ranks on it);
# 4. the bench: with 2 GPUs, our schedules over NCCL, NCCL's own collective inside
#    scalecomm and stock ProcessGroupNCCL side by side; on any GPU count, host
#    staging chunked (copies overlapped with the collective) against whole-tensor
#    copies, with gloo on the same CUDA buffers.
# Each step's output goes to its own file; report.md says which passed.
# GPU_CHECK_STEP_S caps each step's seconds (default 1800); a step cut off reads
# "FAIL (exit 124)".
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-report}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
LIMIT=${GPU_CHECK_STEP_S:-1800}
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
  echo "| step | result | seconds | output |"
  echo "| --- | --- | --- | --- |"
} > "$REPORT"

step() {  # step NAME COMMAND...: runs it (at most LIMIT s), records pass/fail and where its output went
  local name=$1
  shift
  local log="$OUT/$name.txt" start=$SECONDS rc=0
  echo "== $name: $*"
  timeout "$LIMIT" "$@" > "$log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    echo "| $name | pass | $((SECONDS - start)) | $name.txt |" >> "$REPORT"
  else
    echo "| $name | **FAIL** (exit $rc) | $((SECONDS - start)) | $name.txt |" >> "$REPORT"
  fi
  tail -3 "$log"
}

# Failures are written as they happen (a step cut off at its limit keeps them);
# a rank killed by a signal prints its Python stack (how a host memcpy of device
# memory was found).
export SC_TEST_FAILURE_LOG="$OUT/gpu-test-failures.txt" PYTHONFAULTHANDLER=1
PYTEST_ARGS=(-m gpu -v -p no:cacheprovider)
if "$PY" -c "import pytest_timeout" 2> /dev/null; then
  PYTEST_ARGS+=(--timeout=60)  # one hung test does not take the whole step
fi
SHARE=()
[ "$GPUS" = 1 ] && SHARE=(env SC_TEST_SHARE_GPU=1)
# The quick single-process ones first, then the multi-rank ones.
step gpu-kernels "$PY" -m pytest "${PYTEST_ARGS[@]}" tests/gpu/test_cuda_kernels.py
step gpu-tests "${SHARE[@]}" "$PY" -m pytest "${PYTEST_ARGS[@]}" tests --ignore=tests/gpu/test_cuda_kernels.py
if [ "$GPUS" -ge 2 ]; then
  step bench-allreduce "$PY" -m pyscalecomm.bench --nproc 2 --device cuda --algos ring,rhd,tree,nccl --baselines nccl \
    -b 8K -e 256M -f 4 --rounds 3 --json "$OUT/bench-allreduce.jsonl"
  step bench-every-collective "$PY" -m pyscalecomm.bench --nproc 2 --device cuda --collectives all --baselines nccl \
    -b 8K -e 64M -f 8 --rounds 3 --json "$OUT/bench-every-collective.jsonl"
  step train-vs-nccl "$PY" -m pyscalecomm.train --device cuda --sweep world=2 backend=nccl,scalecomm --epochs 2 \
    --out-dir "$OUT/train"
elif [ "$GPUS" = 1 ]; then
  step train-vs-gloo-one-gpu env SCALECOMM_CUDA_TRANSPORT=host "$PY" -m pyscalecomm.train --device cuda \
    --sweep world=2 backend=gloo,scalecomm --epochs 2 --out-dir "$OUT/train"
else
  echo "| bench, training | skipped: no GPU | | |" >> "$REPORT"
fi
if [ "$GPUS" -ge 1 ]; then
  # Host staging (the fallback without NCCL, and ranks that share a GPU): chunked and
  # overlapped (default) against whole-tensor copies, gloo on the same CUDA buffers.
  step bench-host-staged-chunked env SCALECOMM_CUDA_TRANSPORT=host "$PY" -m pyscalecomm.bench --nproc 2 \
    --device cuda --algos ring --baselines gloo -b 1M -e 256M -f 4 -n 10 -w 3 --rounds 3 \
    --json "$OUT/bench-host-staged-chunked.jsonl"
  step bench-host-staged-whole env SCALECOMM_CUDA_TRANSPORT=host SCALECOMM_STAGE_CHUNK_BYTES=1099511627776 "$PY" \
    -m pyscalecomm.bench --nproc 2 --device cuda --algos ring --baselines gloo -b 1M -e 256M -f 4 -n 10 -w 3 \
    --rounds 3 --json "$OUT/bench-host-staged-whole.jsonl"
fi
echo
cat "$REPORT"
