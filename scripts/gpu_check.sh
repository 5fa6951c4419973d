#!/usr/bin/env bash
# What a GPU machine can answer, most valuable first, into one report:
#   bash scripts/gpu_check.sh [report-dir]                 (default: gpu-report/)
#   GPU_CHECK_STEPS=train-1gbit,kernels bash scripts/gpu_check.sh    (only these steps)
#   GPU_CHECK_DEADLINE_S=480 bash scripts/gpu_check.sh     (start no step past 480 s; limits shrink to fit)
# An image without iproute2 (ip, tc) takes the one `bash scripts/pack_iproute2.sh` packs into .carry/
# on the machine that sends the tree (carry .carry with it).
# Steps (each one's output in <report-dir>/<step>.txt, report.md written as they end):
#   build            the extension for this Python and torch, with CUDA (skipped when it imports with CUDA)
#   kernel-tests     the CUDA kernels against the CPU reducer, the codecs on the GPU against the host's
#   kernels          bench/cuda_kernels.py: our reductions against the device copy and torch's ops
#   links            can this machine make an emulated cluster (network namespaces, veth, tc tbf)?
#   train-1gbit      the training driver: DDP on scalecomm (its NCCL channel) against ProcessGroupNCCL,
#                    uncompressed (NCCL's allreduce inside scalecomm, and our ring), top-k and PowerSGD,
#                    both ranks' hosts on 1 Gbit/s links (without namespaces: train-loopback, uncapped,
#                    labelled so)
#   bench-allreduce  our ring, rhd, tree and NCCL's own allreduce inside scalecomm against
#                    ProcessGroupNCCL, the same NCCL socket transport under all of them
#   bench-compress   compressed allreduce encoded on the GPU over NCCL against staged through the
#                    host, beside NCCL's uncompressed allreduce
#   train-10gbit     as train-1gbit on 10 Gbit/s links
#   bench-every-collective  every collective against ProcessGroupNCCL
#   train-host-staged  scalecomm staging CUDA tensors through the host (TCP) on 1 Gbit/s links
#   gpu-tests        the rest of the GPU test suite (every collective x dtype x algorithm over NCCL, streams, graphs, DDP)
# With one GPU, two ranks share it: each rank (or emulated host) gets its own NCCL_HOSTID, so
# NCCL, stock and ours alike, joins them through its socket transport, over the capped links
# where there are some.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-report}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
STEP_LIMIT=${GPU_CHECK_STEP_S:-1800}
DEADLINE=${GPU_CHECK_DEADLINE_S:-86400}
ONLY=",${GPU_CHECK_STEPS:-},"
REPORT="$OUT/report.md"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
# An image without iproute2 uses the one scripts/pack_iproute2.sh packed (carried with the tree).
if ! ip -V > /dev/null 2>&1 && [ -x .carry/iproute2/bin/ip ]; then
  export PATH="$PWD/.carry/iproute2/bin:$PATH"
fi

wanted() {  # the build runs whenever needed; the links probe whenever a training step on links does
  [ "$ONLY" = ",," ] || [ "$1" = build ] || [[ "$ONLY" == *",$1,"* ]] ||
    { [ "$1" = links ] && [[ "$ONLY" == *",train-"* ]]; }
}

step() {  # step NAME MIN_S COMMAND...: runs it within the step limit and the deadline; records the outcome
  local name=$1 min=$2
  shift 2
  wanted "$name" || return 0
  local left=$((DEADLINE - SECONDS)) log="$OUT/$name.txt" start=$SECONDS rc=0
  if [ "$left" -lt "$min" ]; then
    echo "| $name | skipped: ${left} s left of the deadline, needs ${min} | | |" >> "$REPORT"
    return 0
  fi
  local limit=$((left < STEP_LIMIT ? left : STEP_LIMIT))
  echo "== $name (limit ${limit} s): $*"
  timeout -k 10 "$limit" "$@" > "$log" 2>&1 || rc=$?
  if [ "$rc" = 0 ] && grep -qE "^=+ ([0-9]+ skipped|no tests ran)" "$log"; then  # pytest ran nothing
    echo "| $name | **nothing ran** (every test skipped) | $((SECONDS - start)) | $name.txt |" >> "$REPORT"
  elif [ "$rc" = 0 ]; then
    echo "| $name | pass | $((SECONDS - start)) | $name.txt |" >> "$REPORT"
  else
    echo "| $name | **FAIL** (exit $rc) | $((SECONDS - start)) | $name.txt |" >> "$REPORT"
  fi
  tail -25 "$log"
}

HAVE_C=$("$PY" -c "from pyscalecomm import _C; print(int(_C.built_with_cuda))" 2> /dev/null || echo 0)
{
  echo "# scalecomm GPU check ($(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2> /dev/null))"
  echo
  echo "| step | result | seconds | output |"
  echo "| --- | --- | --- | --- |"
} > "$REPORT"
# The system's compiler, whatever CXX the machine sets (one GPU image sets a compiler that links
# libstdc++ statically: such an extension crashes inside torch); GPU_CHECK_CXX/CC choose another.
BUILD_CXX=${GPU_CHECK_CXX:-/usr/bin/g++}
BUILD_CC=${GPU_CHECK_CC:-/usr/bin/gcc}
if [ "$HAVE_C" != 1 ]; then
  step build 60 env CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" CC="$BUILD_CC" CXX="$BUILD_CXX" MAX_JOBS="$(nproc)" \
    "$PY" setup.py --quiet build_ext --inplace
fi
{
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | head -9
  "$PY" -c "import torch, pyscalecomm; from pyscalecomm import _C; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None, '| scalecomm cuda', _C.built_with_cuda, 'nccl', _C.built_with_nccl)" 2>&1 | tail -2
  echo "cpus $(nproc), $(uname -r), $(. /etc/os-release 2> /dev/null && echo "$PRETTY_NAME"), $(command -v ip || echo "no ip")"
  echo '```'
  echo
} > "$OUT/machine.md"
cat "$OUT/machine.md"
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2> /dev/null || echo 0)
if [ "$GPUS" = 0 ]; then
  echo "| everything else | skipped: torch sees no GPU | | |" >> "$REPORT"
  cat "$OUT/machine.md" "$REPORT" > "$OUT/report.tmp" && mv "$OUT/report.tmp" "$REPORT"
  cat "$REPORT"
  exit 1
fi

# Failures are written as they happen (a step cut off at its limit keeps them).
export SC_TEST_FAILURE_LOG="$OUT/gpu-test-failures.txt"
PYTEST_ARGS=(-m gpu -v -p no:cacheprovider)
if "$PY" -c "import pytest_timeout" 2> /dev/null; then
  PYTEST_ARGS+=(--timeout=60)  # one hung test does not take the whole step
fi
SHARE=()
[ "$GPUS" = 1 ] && SHARE=(env SC_TEST_SHARE_GPU=1)  # two ranks on the one GPU, each as its own NCCL host
step kernel-tests 30 "${SHARE[@]}" "$PY" -m pytest "${PYTEST_ARGS[@]}" tests/gpu/test_cuda_kernels.py tests/gpu/test_cuda_codecs.py

# The reduction kernels against the device copy, staging against pinned copies, the codecs' two forms.
step kernels 20 "$PY" bench/cuda_kernels.py --json "$OUT/kernels.json"

# An emulated cluster needs root, network namespaces, veth pairs, a bridge and tc's tbf.
LINKS=0
if wanted links; then
  step links 10 "$PY" -m pyscalecomm.cluster --hosts 2 --rate 1gbit --timeout 20 --id 9 -- true
  grep -q "| links | pass" "$REPORT" && LINKS=1
fi

# The driver: DDP of a 1.1M-parameter MLP (4.3 MiB of fp32 gradients per step), NCCL's final
# accuracy and time per epoch as the baseline; two repeats, round-robin. scalecomm runs NCCL's own
# allreduce on CUDA tensors unless a schedule is named: algo=ring is our ring over NCCL send/recv.
TRAIN=(--device cuda --width 1024 --epochs 5 --repeat 2 --timeout 60 --no-plots
  --sweep backend/compress/algo=nccl/none/auto,nccl/powersgd:2/auto,scalecomm/none/auto,scalecomm/none/ring,scalecomm/topk:0.01/auto,scalecomm/powersgd:2/auto)
if [ "$LINKS" = 1 ]; then
  step train-1gbit 60 "$PY" -m pyscalecomm.train "${TRAIN[@]}" --cluster-rate 1gbit --out-dir "$OUT/train-1gbit"
else
  step train-loopback 60 "$PY" -m pyscalecomm.train "${TRAIN[@]}" --out-dir "$OUT/train-loopback"
fi

# Two ranks (sharing the GPU where there is one): the same NCCL socket transport under our
# schedules, NCCL's allreduce inside scalecomm, and stock ProcessGroupNCCL.
step bench-allreduce 40 "$PY" -m pyscalecomm.bench --nproc 2 --device cuda --algos ring,rhd,tree,nccl \
  --baselines nccl -b 64K -e 64M -f 4 -n 5 -w 2 --rounds 3 --json "$OUT/bench-allreduce.jsonl"

# Compressed allreduce of CUDA tensors: encoded on the GPU and sent over NCCL (@torch) against
# staged through the host and encoded there (@host), beside NCCL's uncompressed allreduce.
step bench-compress 40 "$PY" -m pyscalecomm.bench --nproc 2 --device cuda --algos nccl --baselines nccl \
  --compress topk:0.01@host,topk:0.01@torch,powersgd:2@host,powersgd:2@torch,qsgd:8@host,qsgd:8@torch,sign@torch \
  -b 1M -e 64M -f 4 -n 5 -w 2 --rounds 3 --json "$OUT/bench-compress.jsonl"

if [ "$LINKS" = 1 ]; then
  step train-10gbit 60 "$PY" -m pyscalecomm.train "${TRAIN[@]}" --cluster-rate 10gbit --out-dir "$OUT/train-10gbit"
fi

step bench-every-collective 40 "$PY" -m pyscalecomm.bench --nproc 2 --device cuda --collectives all \
  --baselines nccl -b 64K -e 16M -f 16 -n 5 -w 2 --rounds 3 --json "$OUT/bench-every-collective.jsonl"

if [ "$LINKS" = 1 ]; then
  step train-host-staged 40 env SCALECOMM_CUDA_TRANSPORT=host "$PY" -m pyscalecomm.train --device cuda \
    --width 1024 --epochs 5 --timeout 60 --no-plots --sweep backend=nccl,scalecomm --cluster-rate 1gbit \
    --out-dir "$OUT/train-host-staged"
fi

step gpu-tests 120 "${SHARE[@]}" "$PY" -m pytest "${PYTEST_ARGS[@]}" tests --ignore=tests/gpu/test_cuda_kernels.py \
  --ignore=tests/gpu/test_cuda_codecs.py

cat "$OUT/machine.md" "$REPORT" > "$OUT/report.tmp" && mv "$OUT/report.tmp" "$REPORT"
echo
cat "$REPORT"
