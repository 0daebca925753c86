#!/usr/bin/env bash
# What a phase of the persistent decode step (decode_step.cu) is made of, on a GPU machine, without the model file:
# decode_step_bench on random weights of SmolLM2's shape, built as an experiment (-DFLASHCPP_DECODE_STEP_PROBE).
#
#   here:         bash examples/llm/decode-step-probe.sh build [BASE_COMMIT]   # .dsb/opt (this tree), .dsb/base
#   here:         bash examples/llm/decode-step-probe.sh variant NAME PATCH [NVCC FLAGS...]  # .dsb/NAME: tree + patch
#   device call:  bash examples/llm/decode-step-probe.sh run OUT_DIR           # carry .dsb (ignored by git)
#   device call:  bash examples/llm/decode-step-probe.sh ab OUT_DIR NAME...    # opt and each variant, traced
#
# `run` compares the two builds' logits on the same random model (base: a version whose logits matched the reference
# backend on the real model), times both, then times the tree's build with each probe bit (decode_step.cu lists
# them) and with half the blocks, and traces it (decode_step_trace.py). `ab` compares opt and each named variant
# against base's logits, times them in turn twice, and traces each. One DECODE_STEP_BENCH line per step size (1, 2, 4
# tokens) and build. Logits equal to base's say the arithmetic is unchanged on this model only (one context length,
# one sequence a token): a variant that changes what steps of several sequences read needs the real model's tests.
# DECODE_STEP_CONTEXT=N runs `ab` at that context instead of 168 (base and the builds alike).
set -euo pipefail
cd "$(dirname "$0")/../.."
build_one() {  # build_one SOURCE_DIR OUTPUT [NVCC FLAGS...]
  local src=$1 dst=$2
  shift 2
  nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a "$@" -I"$src" "$src/decode_step_bench.cu" \
    "$src/decode_step.cu" -o "$dst"
}
compare_logits() {  # compare_logits A.bin B.bin: two --dump files of the same random model
  python3 - "$1" "$2" <<'EOF'
import sys
import numpy as np
a, b = (np.fromfile(f, dtype=np.float32) for f in sys.argv[1:3])
print("finite:", bool(np.isfinite(a).all()), bool(np.isfinite(b).all()))
at = 0
for t in (1, 2, 4):
    n = t * 49152
    x, y = a[at:at + n].reshape(t, -1).astype(np.float64), b[at:at + n].reshape(t, -1).astype(np.float64)
    at += n
    cos = min(float(u @ v / np.sqrt((u @ u) * (v @ v))) for u, v in zip(x, y))
    same = [int(u.argmax() == v.argmax()) for u, v in zip(x, y)]
    print(f"tokens {t}: max |diff| {np.abs(x - y).max():.4g} of max |logit| {np.abs(x).max():.4g}, "
          f"least cosine {cos:.7f}, top-1 same {same}")
EOF
}
case "${1:-}" in
  build)
    mkdir -p .dsb
    build_one examples/llm .dsb/opt -DFLASHCPP_DECODE_STEP_PROBE
    base=${2:-dda5d0a}  # the persistent step's first version (docs/PERFORMANCE.md, "flashcpp-llm")
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    for f in decode_step.cu decode_linear_device.cuh decode_step.hpp decode_linear.hpp; do
      git show "$base:examples/llm/$f" > "$tmp/$f"
    done
    cp examples/llm/decode_step_bench.cu "$tmp/"  # today's bench (--dump) over the old kernel, without probes
    build_one "$tmp" .dsb/base
    ls -la .dsb
    ;;
  variant)
    name=${2:?usage: variant NAME PATCH [NVCC FLAGS...]}
    patch=${3:?usage: variant NAME PATCH [NVCC FLAGS...]}
    shift 3
    mkdir -p .dsb
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    cp examples/llm/*.cu examples/llm/*.cuh examples/llm/*.hpp "$tmp/"
    git apply --directory="$tmp" -p3 --unsafe-paths "$patch"
    build_one "$tmp" ".dsb/$name" -DFLASHCPP_DECODE_STEP_PROBE "$@"
    ls -la ".dsb/$name"
    ;;
  ab)
    out=${2:?usage: ab OUT_DIR NAME...}
    shift 2
    mkdir -p "$out"
    ctx=(${DECODE_STEP_CONTEXT:+--context "$DECODE_STEP_CONTEXT"})
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
    .dsb/base ${ctx[@]+"${ctx[@]}"} --dump "$out/base.bin" > "$out/base.txt"
    for v in opt "$@"; do
      .dsb/"$v" ${ctx[@]+"${ctx[@]}"} --dump "$out/$v.bin" > /dev/null
      echo "== $v against base"
      compare_logits "$out/base.bin" "$out/$v.bin"
      rm -f "$out/$v.bin"
    done | tee "$out/compare.txt"
    rm -f "$out/base.bin"
    for round in 1 2; do
      for v in opt "$@"; do echo "== $v" && .dsb/"$v" ${ctx[@]+"${ctx[@]}"}; done
    done | tee "$out/times.txt"
    for v in opt "$@"; do
      .dsb/"$v" ${ctx[@]+"${ctx[@]}"} --trace "$out/trace.bin" > /dev/null
      echo "== $v"
      # a build with other phases a layer than five is misread, or refused, by the reduction: its times still stand
      python3 examples/llm/decode_step_trace.py "$out/trace.bin" || echo "(trace of $v not reduced)"
    done > "$out/traces.txt"
    rm -f "$out/trace.bin"
    grep -A8 "tokens 1" "$out/traces.txt" || true
    ;;
  run)
    out=${2:?usage: run OUT_DIR}
    mkdir -p "$out"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
    .dsb/base --dump "$out/base.bin" | tee "$out/base.txt"
    .dsb/opt --dump "$out/opt.bin" | tee "$out/opt.txt"
    compare_logits "$out/base.bin" "$out/opt.bin" | tee "$out/compare.txt"
    rm -f "$out/base.bin" "$out/opt.bin"
    for bits in 15 2 1 8 4 16 32 64; do .dsb/opt --probe "$bits"; done | tee "$out/probes.txt"
    .dsb/opt --grid 66 | tee -a "$out/probes.txt"
    .dsb/opt --trace "$out/trace.bin" > /dev/null
    python3 examples/llm/decode_step_trace.py "$out/trace.bin" | tee "$out/trace.txt"
    rm -f "$out/trace.bin"
    ;;
  *) sed -n 2,11p "$0" >&2; exit 2 ;;
esac
