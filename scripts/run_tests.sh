#!/usr/bin/env bash
# Every test: set up, lint, C++ unit tests (ctest), Python multi-process tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}

"$PY" -m ruff check pyscalecomm tests bench
"$PY" -m ruff format --check pyscalecomm tests bench
find csrc tests/cpp -name '*.h' -o -name '*.cc' | xargs clang-format --dry-run --Werror

cmake -S . -B build/cpp -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/cpp
ctest --test-dir build/cpp --output-on-failure

"$PY" -m pytest -q tests "$@"
