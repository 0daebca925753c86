#!/usr/bin/env bash
# The twenty-ninth session's third call. Kit .mla-kit-b11.tgz (ignored): main at 0cba34f (`head`) and five builds of
# twentyninth-pair-next2.patch (P = docs/gpu-runs/2026-12-07/twentyninth-pair-next2.patch):
#   bash scripts/mla-variants.sh build build-gpu-full .mla-kit-b11 head pfr=P@-DFLASHCPP_EXP_PF_POS=3 \
#     pf0=P@-DFLASHCPP_EXP_PF_POS=1 loc1=P@-DFLASHCPP_EXP_PAIR_LOCAL=6 loc2=P@-DFLASHCPP_EXP_PAIR_LOCAL=14 \
#     loc3=P@-DFLASHCPP_EXP_PAIR_LOCAL=15
#   pfr   the pair's L2 prefetch of the next tiles from rank 0 alone (both CTAs asked for the same tiles)
#   pf0   the same from token 0's pair alone (at s_q 2 the two pairs of a request ask for the same tiles too)
#   loc1  the two halves released last in an iteration (A-right, B-left) loaded by each CTA alone (TMA, no multicast):
#         their refill no longer waits for the peer's release
#   loc2  loc1 and B-right
#   loc3  every half by each CTA alone (the pair without multicast: what the coupling costs)
# Steps: the builds' dense tile-count and graph-replay tests (a gate: a build that fails or hangs is not timed),
# then FlashMLA's dense suite beside FlashMLA, both orders.
#   bash docs/gpu-runs/2026-12-07/twentyninth-call3.sh   (carry .mla-kit-b11.tgz and .flashmla-kit.tgz)
set -u
out=${OUT:-$(mktemp -d)}
fm=$(mktemp -d)
tar xzf .flashmla-kit.tgz -C "$fm"
export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
# (The gate ran as a loop here when the call was made; mla-variants.sh's MLA_VARIANTS_GATE does the same since.)
MLA_VARIANTS_GATE='MlaGpuDenseDecode.EveryTileCountAndCut:MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' OUT=$out \
  MLA_VARIANTS_BUDGET_S=${TIME_S:-330} bash scripts/mla-variants.sh run .mla-kit-b11.tgz dense head pfr pf0 loc1 loc2 loc3 -- none
