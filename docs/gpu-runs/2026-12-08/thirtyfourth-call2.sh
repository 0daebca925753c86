#!/usr/bin/env bash
# The thirty-fourth session's second call: the persistent unsplit 16-bit prefill grid (one round of CTAs, token slot i
# running tokens i, i + slots, ...) timed against main on FlashMLA's prefill suite, FlashMLA in the rotation, one
# process, the same tensors, both orders, after a gate of every prefill test on every build:
#   pr1: persistent, a later token's Q and tiles in the order of a fresh CTA (its Q after the last epilogue, then its
#        tiles), the fourteenth session's form;
#   pr2: persistent, a later token's first two tiles gathered while the last token's epilogue runs, its Q after them.
# (thirtyfourth-persistent-prefill.patch, FLASHCPP_EXP_PERSIST 1 / 2.)
# Here, first (kit p, ignored):
#   P=docs/gpu-runs/2026-12-08/thirtyfourth-persistent-prefill.patch
#   FLASHCPP_GOLDEN_DIR=<shared data>/flashmla-golden bash scripts/mla-variants.sh build build-gpu-full .mla-kit-p head \
#     "pr1=$P@-DFLASHCPP_EXP_PERSIST=1" "pr2=$P@-DFLASHCPP_EXP_PERSIST=2"
# Then one device call carrying .mla-kit-p.tgz and .flashmla-kit.tgz (FlashMLA main@9241ae3's package, built on the
# GPU machine beforehand; nothing here builds it):
#   bash docs/gpu-runs/2026-12-08/thirtyfourth-call2.sh
set -u
start=$SECONDS
out=${OUT:-$(mktemp -d)}
fmk=$(mktemp -d)
tar xzf .flashmla-kit.tgz -C "$fmk" && export PYTHONPATH=$fmk/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
OUT=$out MLA_VARIANTS_GATE=${MLA_VARIANTS_GATE:-MlaGpuPrefill.*} MLA_VARIANTS_GATE_S=${GATE_S:-150} \
  MLA_VARIANTS_BUDGET_S=$((${CALL_S:-585} - (SECONDS - start))) \
  bash scripts/mla-variants.sh run .mla-kit-p.tgz prefill head ${BUILDS:-pr1 pr2} -- none
