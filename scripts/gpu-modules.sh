#!/usr/bin/env bash
# Builds every module of `flashcpp build --defaults` (flashcpp::jit::default_uris()) from the pinned
# FlashInfer sources, for sm_90a, into a module cache, and prints each module's build time and size.
# Meant for the H200 machine (16 cores, CUDA 13.0 nvcc, no network); works anywhere nvcc is.
#
#   scripts/gpu-modules.sh CACHE_DIR [JOBS]
#
# Modules land at CACHE_DIR/jit/<key>/<uri>/<uri>.so; point the runtime at them with
#   FLASHCPP_CACHE_DIR=CACHE_DIR  (the builder finds them by key)  or
#   FLASHCPP_MODULE_PATH=CACHE_DIR/jit/<key>  (the directory printed at the end).
# A second run is a cache hit for every module (seconds). Environment honoured: FLASHCPP_BIN (the flashcpp
# binary; default build/bin/flashcpp), CUDA_HOME, FLASHCPP_FLASHINFER_DIR, FLASHCPP_TVM_FFI_INCLUDE.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 CACHE_DIR [JOBS]" >&2
  exit 2
fi
cache_dir=$1
jobs=${2:-16}
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${FLASHCPP_BIN:-$repo/build/bin/flashcpp}
if [[ ! -x $bin ]]; then
  echo "gpu-modules: $bin not found; build the CLI first (cmake --build build --target flashcpp_cli) or set FLASHCPP_BIN" >&2
  exit 1
fi
if [[ -z ${CUDA_HOME:-} ]] && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDA_HOME=/usr/local/cuda
fi
# The binary's compiled-in source locations may be another machine's; prefer this checkout's pinned wheels.
deps=$repo/build/_deps
if [[ -z ${FLASHCPP_FLASHINFER_DIR:-} && -d $deps/flashinfer_python/flashinfer/data/csrc ]]; then
  export FLASHCPP_FLASHINFER_DIR=$deps/flashinfer_python/flashinfer/data
fi
if [[ -z ${FLASHCPP_TVM_FFI_INCLUDE:-} && -d $deps/apache_tvm_ffi/tvm_ffi/include ]]; then
  export FLASHCPP_TVM_FFI_INCLUDE=$deps/apache_tvm_ffi/tvm_ffi/include
fi
mkdir -p "$cache_dir"
log=$cache_dir/gpu-modules.log
echo "gpu-modules: $(nproc) cores, $( (nvcc --version 2>/dev/null || "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version) | tail -1), jobs $jobs"
start=$(date +%s)
set +e
"$bin" build --defaults --arch 9.0a --jobs "$jobs" --cache-dir "$cache_dir" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
end=$(date +%s)
echo "gpu-modules: wall time $((end - start)) s, exit status $rc (log: $log)"
exit "$rc"
