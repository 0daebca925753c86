#!/usr/bin/env bash
# The thirty-second session's suite call: FlashMLA main@9241ae3's package built on the GPU machine from its source
# (unless .flashmla-kit.tgz is carried), then FlashMLA's suites (OPS, default "prefill dense") beside main's library in
# one process on the same tensors (twentyseventh-suites.sh).
# Here, first:
#   kit s (ignored): main's stripped library, its dependencies, test_mla_gpu and the golden cases:
#     FLASHCPP_GOLDEN_DIR=<shared data>/flashmla-golden bash scripts/mla-variants.sh build build-gpu-full .mla-kit-a head
#     mkdir .mla-kit-s && cp -a .mla-kit-a/{head,lib,test_mla_gpu,golden} .mla-kit-s/ && tar czf .mla-kit-s.tgz .mla-kit-s
#   .flashmla-src.tgz (ignored, never committed): FlashMLA at 9241ae3 with CUTLASS 147f5673's include and
#   tools/util/include in csrc/cutlass (its submodule), from `git archive` of both.
# Then one device call carrying .mla-kit-s.tgz and .flashmla-src.tgz (or .flashmla-kit.tgz):
#   bash docs/gpu-runs/2026-12-07/thirtysecond-suites.sh
# FlashMLA's package comes back as flashmla-kit.tgz (carry it as .flashmla-kit.tgz in later calls).
set -u
out=${OUT:-$(mktemp -d)}
if [[ ! -f .flashmla-kit.tgz ]]; then
  fm=$(mktemp -d)
  tar xzf .flashmla-src.tgz -C "$fm"
  cuda=$(dirname "$(dirname "$(command -v nvcc)")")  # CUDA 13 keeps libcu++ under include/cccl
  (cd "$fm/FlashMLA" &&
    FLASH_MLA_DISABLE_SM100=1 MAX_JOBS=16 CPLUS_INCLUDE_PATH=$cuda/include/cccl \
      timeout "${BUILD_S:-300}" python3 setup.py build_ext --inplace > "$fm/build.txt" 2>&1
  echo "flashmla build exit $?" >> "$fm/build.txt")
  tail -2 "$fm/build.txt"
  mkdir -p "$fm/kit/.flashmla-kit" && cp -r "$fm/FlashMLA/flash_mla" "$fm/kit/.flashmla-kit/" &&
    (cd "$fm/kit" && tar czf "$out/flashmla-kit.tgz" .flashmla-kit) && cp "$out/flashmla-kit.tgz" .flashmla-kit.tgz
fi
OUT=$out OPS=${OPS:-prefill dense} bash docs/gpu-runs/2026-12-07/twentyseventh-suites.sh
