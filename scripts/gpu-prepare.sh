#!/usr/bin/env bash
# Runs here (no GPU): builds everything for the GPU machine and stages what that machine needs:
#   build-gpu/  a stripped copy of the build tree (no objects, no debug info)
#   .gpu/       the pinned wheels, the golden data, and the shared libraries our binaries need
# Then one device call runs `bash scripts/gpu-check.sh` with carry = [build-gpu, .gpu].
# Usage: scripts/gpu-prepare.sh [build-dir]   (default build-gpu-full; configured if absent)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
full="${1:-build-gpu-full}"
bash scripts/deps.sh
if [[ ! -f $full/CMakeCache.txt ]]; then
  cmake -S . -B "$full" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHCPP_DEPS_DIR="$root/build/_deps" >/dev/null
fi
cmake --build "$full" -j "$(nproc)"

rm -rf build-gpu && cp -a "$full" build-gpu
find build-gpu \( -name '*.o' -o -name '*.o.d' \) -delete
rm -rf build-gpu/jit-test-cache
find build-gpu -type f \( -perm -u+x -o -name '*.so' \) -print0 |
  while IFS= read -r -d '' f; do file "$f" | grep -q ELF && strip --strip-debug "$f"; done

rm -rf .gpu && mkdir -p .gpu/wheels .gpu/lib
cp build/_deps/wheels/apache_tvm_ffi-*.whl build/_deps/wheels/flashinfer_python-*.whl .gpu/wheels/
golden="${FLASHCPP_GOLDEN_DIR:-$full/tests/data/flashmla-golden}"  # the repository's copy, unpacked by CMake
[[ -d $golden ]] && cp -r "$golden" .gpu/golden
# The DeepSeek V4 cases are not in the repository's copy (size); take them from the project's shared data.
for case_dir in "$root"/../shared/data/flashmla-golden/model1_*; do
  [[ -d $case_dir ]] && mkdir -p .gpu/golden && cp -r "$case_dir" .gpu/golden/
done
# Every shared library our binaries load, except the C runtime and CUDA (the GPU image has its own);
# gpu-check.sh appends this folder to LD_LIBRARY_PATH so the image's libraries win where present.
for bin in build-gpu/libflashcpp.so build-gpu/bin/flashcpp build-gpu/bench/bench_ffi; do
  [[ -e $bin ]] || continue
  ldd "$bin" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -v -E '/(libflashcpp|libc|libm|libdl|librt|libpthread|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart)\.so' |
  while read -r lib; do cp -L "$lib" .gpu/lib/; done
du -sh build-gpu .gpu
