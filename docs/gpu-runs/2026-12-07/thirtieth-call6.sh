#!/usr/bin/env bash
# The thirtieth session's sixth call: consumer 1's order in every two-tile instantiation, timed on FlashMLA's prefill
# suite (owed since the twenty-ninth session, whose kit b12 gated them but had no time left). Kit .mla-kit-p12.tgz
# (ignored): main at 773c1f2 (`head`) and two builds of twentyninth-c1-order.patch (P):
#   bash scripts/mla-variants.sh build build-gpu-full .mla-kit-p12 head \
#     "erba=P@-DFLASHCPP_EXP_C1_ORDER=1 -DFLASHCPP_EXP_C1_ALL=1" "spfa=P@-DFLASHCPP_EXP_C1_ORDER=2 -DFLASHCPP_EXP_C1_ALL=1"
# Steps: each build's prefill sweep, strided views and dense tile counts as a gate, then FlashMLA's prefill suite with
# the builds that pass, both orders, FlashMLA's package (.flashmla-kit.tgz, ignored) in the same process.
#   bash docs/gpu-runs/2026-12-07/thirtieth-call6.sh   (carry .mla-kit-p12.tgz and .flashmla-kit.tgz)
set -u
out=${OUT:-$(mktemp -d)}
fm=$(mktemp -d); tar xzf .flashmla-kit.tgz -C "$fm"
export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
MLA_VARIANTS_GATE='MlaGpuPrefill.Sweep:MlaGpuPrefill.StridedQueryAndOutput:MlaGpuDenseDecode.EveryTileCountAndCut' \
  OUT=$out MLA_VARIANTS_BUDGET_S=${TIME_S:-290} bash scripts/mla-variants.sh run .mla-kit-p12.tgz prefill head erba spfa -- none
