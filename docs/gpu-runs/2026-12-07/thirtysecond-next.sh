#!/usr/bin/env bash
# Prepared in the thirty-second session, not run there (its device time was spent): the next CTA's first reads
# prefetched into the L2 (thirtysecond-next-prefetch.patch, flag FLASHCPP_EXP_NEXT_PREFETCH), timed against main on
# FlashMLA's prefill suite in one process on the same tensors, both orders, after a gate of the prefill tests.
# Here, first (kit n, ignored, 26 MB; a few minutes on two cores):
#   FLASHCPP_GOLDEN_DIR=<shared data>/flashmla-golden bash scripts/mla-variants.sh build build-gpu-full .mla-kit-n head \
#     "np1=docs/gpu-runs/2026-12-07/thirtysecond-next-prefetch.patch@-DFLASHCPP_EXP_NEXT_PREFETCH=1" \
#     "np2=docs/gpu-runs/2026-12-07/thirtysecond-next-prefetch.patch@-DFLASHCPP_EXP_NEXT_PREFETCH=2" \
#     "np3=docs/gpu-runs/2026-12-07/thirtysecond-next-prefetch.patch@-DFLASHCPP_EXP_NEXT_PREFETCH=3"
#   (FLASHMLA_PKG=<a flash_mla package built on the GPU machine> puts FlashMLA in the rotation too.)
# Then one device call carrying .mla-kit-n.tgz:
#   bash docs/gpu-runs/2026-12-07/thirtysecond-next.sh
set -u
MLA_VARIANTS_GATE=${MLA_VARIANTS_GATE:-MlaGpuPrefill.GoldenCases:MlaGpuPrefill.StridedQueryAndOutput} \
  MLA_VARIANTS_BUDGET_S=${MLA_VARIANTS_BUDGET_S:-420} \
  bash scripts/mla-variants.sh run .mla-kit-n.tgz prefill head np1 np2 np3 -- 'MlaGpuPrefill.*'
