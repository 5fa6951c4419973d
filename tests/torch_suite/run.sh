#!/usr/bin/env bash
# PyTorch's distributed test suite against scalecomm, 2 ranks.
#   bash tests/torch_suite/run.sh                  # everything (20+ minutes here)
#   bash tests/torch_suite/run.sh -k all_reduce    # a subset (CI runs one)
set -euo pipefail
cd "$(dirname "$0")/../.."
export BACKEND=scalecomm WORLD_SIZE=${WORLD_SIZE:-2}
# With CI set, torch's run_tests() switches to PyTorch's own CI mode (XML
# reports through xmlrunner, CI-only test filters); we want the plain runner.
unset CI
TEMP_DIR=$(mktemp -d)
export TEMP_DIR
trap 'rm -rf "$TEMP_DIR"' EXIT
python3 tests/torch_suite/run_suite.py "$@"
