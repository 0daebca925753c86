#!/usr/bin/env bash
# The thirty-third session's first call: the L2 prefetch builds of the
# unsplit 16-bit prefill timed against main on FlashMLA's prefill suite, FlashMLA in the rotation, one process, the
# same tensors, both orders, after a gate of the prefill golden tests on every build:
#   np1-np3: the next CTA's first reads (thirtysecond-next-prefetch.patch, FLASHCPP_EXP_NEXT_PREFETCH);
#   kvp1-kvp3: the next iteration's gathered rows, a bulk prefetch a row, at the iteration's end, after its second
#   step, after its first (thirtythird-kv-prefetch.patch, FLASHCPP_EXP_KV_PREFETCH).
# Here, first (kit n, ignored):
#   P1=docs/gpu-runs/2026-12-07/thirtysecond-next-prefetch.patch P2=docs/gpu-runs/2026-12-07/thirtythird-kv-prefetch.patch
#   FLASHCPP_GOLDEN_DIR=<shared data>/flashmla-golden bash scripts/mla-variants.sh build build-gpu-full .mla-kit-n head \
#     "np1=$P1@-DFLASHCPP_EXP_NEXT_PREFETCH=1" "np2=$P1@-DFLASHCPP_EXP_NEXT_PREFETCH=2" "np3=$P1@-DFLASHCPP_EXP_NEXT_PREFETCH=3" \
#     "kvp1=$P2@-DFLASHCPP_EXP_KV_PREFETCH=1" "kvp2=$P2@-DFLASHCPP_EXP_KV_PREFETCH=2" "kvp3=$P2@-DFLASHCPP_EXP_KV_PREFETCH=3"
# Then one device call carrying .mla-kit-n.tgz and .flashmla-kit.tgz (FlashMLA main@9241ae3's package):
#   bash docs/gpu-runs/2026-12-07/thirtythird-call1.sh
# As run, this call also built FlashMLA's package on the GPU machine from a source archive; that step is not kept:
# the tree builds no fetched code. Bring the package built there as .flashmla-kit.tgz (.flashmla-kit/flash_mla).
set -u
start=$SECONDS
out=${OUT:-$(mktemp -d)}
fmk=$(mktemp -d)
tar xzf .flashmla-kit.tgz -C "$fmk" && export PYTHONPATH=$fmk/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
OUT=$out MLA_VARIANTS_GATE=${MLA_VARIANTS_GATE:-MlaGpuPrefill.GoldenCases:MlaGpuPrefill.StridedQueryAndOutput} \
  MLA_VARIANTS_BUDGET_S=$((${CALL_S:-585} - (SECONDS - start))) \
  bash scripts/mla-variants.sh run .mla-kit-n.tgz prefill head ${BUILDS:-np1 np2 np3 kvp1 kvp2 kvp3} -- none
