#!/usr/bin/env bash
# Runs on the GPU machine in one call: doctor, module builds, GPU tests, benchmarks. Results go to $OUT.
# Expects build-gpu/ and .gpu/ from scripts/gpu-prepare.sh (carried). Steps can be chosen:
#   bash scripts/gpu-check.sh [doctor] [modules] [tests] [bench] [mla] [sanitize]   (default: all)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out="${OUT:-$root/out}"
mkdir -p "$out"
steps="${*:-doctor modules tests mla bench sanitize}"
has() { [[ " $steps " == *" $1 "* ]]; }
log() { echo "== $(date +%T) $*" | tee -a "$out/summary.txt"; }

# The build tree records the absolute source path it was configured in; make that path lead here.
src_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' build-gpu/CMakeCache.txt)
if [[ -n $src_dir && ! -e $src_dir ]]; then mkdir -p "$(dirname "$src_dir")" && ln -s "$root" "$src_dir"; fi
# The pinned wheels, unpacked where the build expects them.
if [[ ! -d build/_deps/apache_tvm_ffi ]]; then
  mkdir -p build/_deps
  for w in .gpu/wheels/*.whl; do
    name=$(basename "$w" | cut -d- -f1)
    python3 -m zipfile -e "$w" "build/_deps/$name"
  done
fi
# Debian builds of libraries the image lacks; the image's own libraries win.
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$root/.gpu/lib"
export FLASHCPP_GOLDEN_DIR="$root/.gpu/golden"
export FLASHCPP_CACHE_DIR="${FLASHCPP_CACHE_DIR:-$root/.gpu-cache}"
export FLASHCPP_OFFLINE=1 NCCL_NVLS_ENABLE=0
cli=build-gpu/bin/flashcpp

if has doctor; then
  log "doctor"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$out/summary.txt"
  $cli doctor 2>&1 | tee "$out/doctor.txt"
fi

if has modules; then
  log "module builds (flashcpp build --defaults)"
  jobs=$(nproc)
  time $cli build --defaults --jobs "$jobs" --arch 9.0a 2>&1 | tee "$out/modules.txt" | tail -40
fi
# Modules the builder produced are found through the Runtime's jit source; FLASHCPP_JIT=off so a missing
# one is reported instead of being built again inside a test.
export FLASHCPP_JIT=off

if has tests; then
  log "GPU tests"
  FLASHCPP_GPU_TESTS=1 ctest --test-dir build-gpu -L gpu -j 1 --timeout 600 --output-on-failure \
    2>&1 | tee "$out/gpu-tests.txt" | tail -40
  log "CPU tests (sanity on this machine)"
  ctest --test-dir build-gpu -L 'ffi|ops|mla' -j 8 2>&1 | tail -5 | tee -a "$out/summary.txt"
fi

if has mla; then
  log "sparse MLA kernels: self-check and benchmark"
  [[ -x build-gpu/bench/bench_sparse_attention_sm90 ]] && build-gpu/bench/bench_sparse_attention_sm90 2>&1 | tee "$out/mla-kernel.txt" | tail -40
  $cli mla-bench 2>&1 | tee "$out/mla-bench.txt" | tail -40
fi

if has bench; then
  log "ops benchmarks"
  $cli bench 2>&1 | tee "$out/bench.txt" | tail -60
  $cli bench-extra 2>&1 | tee "$out/bench-extra.txt" | tail -30
  build-gpu/bench/bench_ffi --benchmark_repetitions=5 --benchmark_report_aggregates_only=true 2>&1 | tee "$out/bench-ffi.txt" | grep median
fi

if has sanitize; then
  log "compute-sanitizer on a small sparse MLA case"
  for tool in memcheck racecheck; do
    FLASHCPP_GPU_TESTS=1 compute-sanitizer --tool $tool --error-exitcode 3 \
      build-gpu/tests/gpu/test_mla_gpu --gtest_filter='*Golden*' 2>&1 | tail -5 | tee -a "$out/sanitize.txt"
  done
fi
log "done"
