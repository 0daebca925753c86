#!/usr/bin/env bash
# Runs here (no GPU): builds everything for the GPU machine into build-gpu/ and stages what that machine
# lacks into .gpu/ (pinned wheels, golden data, shared libraries missing from its image). Then one device
# call runs scripts/gpu-check.sh with carry = [build-gpu, .gpu].
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/deps.sh
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHCPP_DEPS_DIR="$root/build/_deps" >/dev/null
cmake --build build-gpu -j "$(nproc)"
rm -rf .gpu && mkdir -p .gpu/wheels .gpu/lib
cp build/_deps/wheels/*.whl .gpu/wheels/
golden="${FLASHCPP_GOLDEN_DIR:-$root/../shared/data/flashmla-golden}"
[[ -d $golden ]] && cp -r "$golden" .gpu/golden
# Shared libraries the GPU image may lack (Debian builds of the same sonames).
for lib in libzip.so.4 libbenchmark.so.1 libbenchmark_main.so.1; do
  p=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
  [[ -n $p ]] && cp -L "$p" .gpu/lib/
done
du -sh build-gpu .gpu
