#!/usr/bin/env bash
# The README's main command: installs dependencies, builds, and runs `flashcpp demo`
# (FlashInfer kernels on a GPU, checked against the CPU reference; the reference backend without one).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
bash scripts/deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target flashcpp_cli
./build/bin/flashcpp demo "$@"
