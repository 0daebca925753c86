#!/usr/bin/env bash
# Builds FlashInfer's fused_moe_90 module (CUTLASS fused MoE for sm_90a) with FlashInfer's OWN generator
# from the pinned flashinfer-python 0.6.3 wheel, and publishes it into flashcpp's module cache so the
# runtime finds it like any other built module. This is an explicit build-time step that needs Python,
# torch (FlashInfer's build helpers import it), ninja, jinja2 and filelock; flashcpp's run time stays
# free of Python. The C++ generator does not cover this module (see docs/JIT.md).
#
#   scripts/build-fused-moe.sh CACHE_DIR [JOBS] [--subset]
#
# --subset builds only what flashcpp's three MoE modes reach (16-bit, FP8 per-tensor, DeepSeek FP8 block
# scale): 62 of the module's 181 sources (docs/JIT.md has the study and the per-TU times). Two of FlashInfer's
# files are changed in a work copy for it: the binding loses its FP4 and INT4 runner branches (which would
# otherwise pull in their kernels), and the instantiation TU is replaced by one that instantiates the five
# runners those modes use. Such a module refuses FP4/INT4/f32 configurations at init (FlashInfer's "Could
# not construct fused moe op" error); a file fused_moe_90.subset beside it says it is the subset. Heavy TUs
# take 5-7 GB of memory each: give JOBS so that JOBS x 7 GB fits.
#
# Result: CACHE_DIR/jit/<key>/fused_moe_90/fused_moe_90.so (the directory `flashcpp build --print-root`
# names for --arch 9.0a). Environment: FLASHCPP_BIN (default build/bin/flashcpp), PYTHON (default python3).
set -euo pipefail
subset=0
args=()
for a in "$@"; do
  if [[ $a == --subset ]]; then subset=1; else args+=("$a"); fi
done
if [[ ${#args[@]} -lt 1 ]]; then
  echo "usage: $0 CACHE_DIR [JOBS] [--subset]" >&2
  exit 2
fi
cache_dir=$(mkdir -p "${args[0]}" && cd "${args[0]}" && pwd)
jobs=${args[1]:-$(nproc)}
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
  echo "build-fused-moe: cached $out$([[ -f ${out%.so}.subset ]] && echo ' (the subset)')"
  exit 0
fi
# Prefer an installed flashinfer 0.6.3; else the pinned wheel unpacked by scripts/deps.sh.
if ! "$py" -c 'import flashinfer, sys; sys.exit(0 if flashinfer.__version__.startswith("0.6.3") else 1)' 2>/dev/null; then
  export PYTHONPATH=$repo/build/_deps/flashinfer_python:$repo/build/_deps/apache_tvm_ffi:${PYTHONPATH:-}
fi
work=$cache_dir/fused-moe-work
mkdir -p "$work"
export FLASHINFER_WORKSPACE_BASE=$work FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=$jobs
export FLASHCPP_MOE_SUBSET=$subset FLASHCPP_MOE_WORK=$work
start=$(date +%s)
"$py" - <<'PY'
import hashlib, os, re
from pathlib import Path
import flashinfer
from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module
assert flashinfer.__version__.startswith("0.6.3"), flashinfer.__version__
spec = gen_cutlass_fused_moe_sm90_module()

def keep_generated(path):
    """SM80 fused grouped GEMMs (linked lazily, always kept) and SM90 TMA grouped GEMMs whose activation and
    weight are both half, bf16 or e4m3; never the dense gemm/90 files nor the Mixed (INT4/FP4) ones."""
    p = str(path)
    if "/gemm_grouped/80/" in p:
        return True
    if "/gemm_grouped/90/" not in p or "_Mixed_" in path.name:
        return False
    kept = set()
    for m in re.finditer(r"INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM\((.*?)\);", path.read_text(), re.S):
        a = [x.strip() for x in m.group(1).split(",")]
        kept.add(a[1] == a[2] and a[1] in ("half", "__nv_bfloat16", "__nv_fp8_e4m3"))
    assert len(kept) == 1, f"{path.name} mixes element types the subset keeps and drops"
    return kept.pop()

def patched_binding(src, work):
    """The binding without its FP4 and INT4 runner branches (from the #ifdef ENABLE_FP4 after the FP8 branch
    up to the "no runner" check), checked against the pinned file."""
    text = src.read_text()
    assert hashlib.md5(text.encode()).hexdigest() == "849232230a74d3ae4a5b4d5cd9c8a15d", "not the pinned binding"
    lines = text.split("\n")
    fp8 = next(i for i, l in enumerate(lines) if l.strip() == "if (isFp8Quant()) {")
    begin = next(i for i in range(fp8, len(lines)) if lines[i].strip() == "#ifdef ENABLE_FP4")
    end = next(i for i in range(begin, len(lines)) if lines[i].strip() == "if (!mKernelRunner) {")
    assert any("isInt4Quant()" in l for l in lines[begin:end])
    out = [l.replace('#include "../../tvm_ffi_utils.h"', '#include "tvm_ffi_utils.h"') for l in lines[:begin] + lines[end:]]
    dst = work / "subset" / src.name
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(out))
    return dst

def instantiation(work):
    """The runners flashcpp's modes construct, and the finalize routing they use."""
    dst = work / "subset" / "cutlass_fused_moe_instantiation_subset.cu"
    dst.write_text(
        '#include "fused_moe/cutlass_backend/cutlass_fused_moe_kernels.cuh"\n#include "moe_kernels.h"\n'
        "namespace tensorrt_llm::kernels::cutlass_kernels {\n"
        "template class CutlassMoeFCRunner<half, half>;\n"
        "template class CutlassMoeFCRunner<__nv_bfloat16, __nv_bfloat16>;\n"
        "template class CutlassMoeFCRunner<__nv_bfloat16, __nv_fp8_e4m3, __nv_bfloat16>;\n"
        "template class CutlassMoeFCRunner<__nv_fp8_e4m3, __nv_fp8_e4m3, half>;\n"
        "template class CutlassMoeFCRunner<__nv_fp8_e4m3, __nv_fp8_e4m3, __nv_bfloat16>;\n"
        "INSTANTIATE_FINALIZE_MOE_ROUTING(half, half, half);\n"
        "INSTANTIATE_FINALIZE_MOE_ROUTING(float, float, float);\n"
        "INSTANTIATE_FINALIZE_MOE_ROUTING(__nv_bfloat16, __nv_bfloat16, __nv_bfloat16);\n"
        "}\n")
    return dst

if os.environ.get("FLASHCPP_MOE_SUBSET") == "1":
    work = Path(os.environ["FLASHCPP_MOE_WORK"])
    gemm_kept = {"fp16_fp16", "bf16_bf16", "fp8_fp8", "bf16_fp8"}
    sources, generated = [], 0
    for src in map(Path, spec.sources):
        if src.name.endswith(".generated.cu"):
            if keep_generated(src):
                sources.append(src)
                generated += 1
        elif src.name.startswith("moe_gemm_kernels_"):
            if src.stem[len("moe_gemm_kernels_"):] in gemm_kept:
                sources.append(src)
        elif src.name == "flashinfer_cutlass_fused_moe_binding.cu":
            sources.append(patched_binding(src, work))
        elif src.name == "cutlass_fused_moe_instantiation.cu":
            sources.append(instantiation(work))
        else:
            sources.append(src)
    assert (generated, len(sources)) == (45, 62), f"subset of {len(sources)} sources, {generated} generated"
    spec.sources = sources
spec.build(verbose=True)
print("built", spec.jit_library_path)
with open("fused-moe-path.txt", "w") as f:
    f.write(str(spec.jit_library_path))
PY
built=$(cat fused-moe-path.txt)
rm -f fused-moe-path.txt
# Every kernel launcher the module references must be in it (a missing SM80 one would only fail when an
# Ampere tactic runs).
if nm -D --undefined-only "$built" | c++filt | grep -E 'tensorrt_llm|flashinfer|deep_gemm'; then
  echo "build-fused-moe: $built references kernels it does not define" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
if [[ $subset == 1 ]]; then
  echo "flashcpp's subset: 16-bit, FP8 per-tensor and DeepSeek FP8 block-scale runners only" > "${out%.so}.subset"
else
  rm -f "${out%.so}.subset"
fi
cp "$built" "$out.tmp.$$" && mv "$out.tmp.$$" "$out"
echo "build-fused-moe: $out ($(du -k "$out" | cut -f1) KiB, $(( $(date +%s) - start )) s)"
