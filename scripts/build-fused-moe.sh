#!/usr/bin/env bash
# Builds FlashInfer's fused_moe_90 module (CUTLASS fused MoE for sm_90a) with FlashInfer's OWN generator
# from the pinned flashinfer-python 0.6.3 wheel, and publishes it into flashcpp's module cache so the
# runtime finds it like any other built module. This is an explicit build-time step that needs Python,
# torch (FlashInfer's build helpers import it), ninja, jinja2 and filelock; flashcpp's run time stays
# free of Python. The C++ generator does not cover this module (see docs/JIT.md).
#
#   scripts/build-fused-moe.sh CACHE_DIR [JOBS]
#
# Result: CACHE_DIR/jit/<key>/fused_moe_90/fused_moe_90.so (the directory `flashcpp build --print-root`
# names for --arch 9.0a). Environment: FLASHCPP_BIN (default build/bin/flashcpp), PYTHON (default python3).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 CACHE_DIR [JOBS]" >&2
  exit 2
fi
cache_dir=$(mkdir -p "$1" && cd "$1" && pwd)
jobs=${2:-$(nproc)}
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${FLASHCPP_BIN:-$repo/build/bin/flashcpp}
py=${PYTHON:-python3}
[[ -x $bin ]] || { echo "build-fused-moe: $bin not found (build flashcpp_cli or set FLASHCPP_BIN)" >&2; exit 1; }
if [[ -z ${CUDA_HOME:-} ]] && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDA_HOME=/usr/local/cuda
fi
root=$("$bin" build --print-root --arch 9.0a --cache-dir "$cache_dir")
out=$root/fused_moe_90/fused_moe_90.so
if [[ -f $out ]]; then
  echo "build-fused-moe: cached $out"
  exit 0
fi
# Prefer an installed flashinfer 0.6.3; else the pinned wheel unpacked by scripts/deps.sh.
if ! "$py" -c 'import flashinfer, sys; sys.exit(0 if flashinfer.__version__.startswith("0.6.3") else 1)' 2>/dev/null; then
  export PYTHONPATH=$repo/build/_deps/flashinfer_python:$repo/build/_deps/apache_tvm_ffi:${PYTHONPATH:-}
fi
work=$cache_dir/fused-moe-work
mkdir -p "$work"
export FLASHINFER_WORKSPACE_BASE=$work FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=$jobs
start=$(date +%s)
"$py" - <<'PY'
import flashinfer
from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module
assert flashinfer.__version__.startswith("0.6.3"), flashinfer.__version__
spec = gen_cutlass_fused_moe_sm90_module()
spec.build(verbose=True)
print("built", spec.jit_library_path)
with open("fused-moe-path.txt", "w") as f:
    f.write(str(spec.jit_library_path))
PY
built=$(cat fused-moe-path.txt)
rm -f fused-moe-path.txt
mkdir -p "$(dirname "$out")"
cp "$built" "$out.tmp.$$" && mv "$out.tmp.$$" "$out"
echo "build-fused-moe: $out ($(du -k "$out" | cut -f1) KiB, $(( $(date +%s) - start )) s)"
