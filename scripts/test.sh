#!/usr/bin/env bash
# The README's test command: installs dependencies, builds in build/, runs every CPU test.
# GPU tests (label gpu) run too but skip themselves unless FLASHCPP_GPU_TESTS=1.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
bash scripts/deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
ctest --test-dir build -j "$(nproc)" --output-on-failure "$@"
