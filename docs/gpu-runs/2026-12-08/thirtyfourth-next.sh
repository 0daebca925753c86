#!/usr/bin/env bash
# Prepared in the thirty-fourth session, not run (no device could be started after its first call): the sparse
# prefill as one round of CTAs (token slot i running tokens i, i + slots, ...; slots = the CTAs resident at once over
# the head groups), timed against main on FlashMLA's prefill suite, FlashMLA in the rotation, one process, the same
# tensors, both orders, after a gate of every prefill test on every build; then compute-sanitizer racecheck on the
# candidate's prefill kernels over more tokens than slots.
#   or:  thirtyfourth-one-round-prefill.patch, the form that would land: a later token's first two tiles gathered
#        while the last token's epilogue runs, its Q after them (SASS: only the two unsplit 16-bit prefill kernels
#        change; every other kernel is main's instruction for instruction);
#   orq: the same patch with FLASHCPP_EXP_NEXT_Q_PREFETCH: also the slot's next token's Q rows prefetched into the L2
#        (one bulk prefetch) after each token's first fills, so that the Q load the epilogue holds back hits the L2;
#   pr1: thirtyfourth-persistent-prefill.patch with FLASHCPP_EXP_PERSIST=1, the control: one round, but a later
#        token's Q and tiles in a fresh CTA's order (its Q after the last epilogue, then its tiles), the fourteenth
#        session's form. (FLASHCPP_EXP_PERSIST=2 builds `or`'s order as first drafted: a callback, more spills.)
# Here, first (kit p, ignored; test_mla_gpu from main with MlaGpuPrefill.MoreTokensThanResidentSlots):
#   D=docs/gpu-runs/2026-12-08
#   FLASHCPP_GOLDEN_DIR=<shared data>/flashmla-golden bash scripts/mla-variants.sh build build-gpu-full .mla-kit-p head \
#     "or=$D/thirtyfourth-one-round-prefill.patch" "orq=$D/thirtyfourth-one-round-prefill.patch@-DFLASHCPP_EXP_NEXT_Q_PREFETCH" \
#     "pr1=$D/thirtyfourth-persistent-prefill.patch@-DFLASHCPP_EXP_PERSIST=1"
# Then one device call carrying .mla-kit-p.tgz and .flashmla-kit.tgz (FlashMLA main@9241ae3's package, built on the
# GPU machine beforehand; nothing here builds it):
#   bash docs/gpu-runs/2026-12-08/thirtyfourth-next.sh
# (RACE_B=orq for the racecheck of the prefetch build instead.)
set -u
start=$SECONDS
out=${OUT:-$(mktemp -d)}
fmk=$(mktemp -d)
tar xzf .flashmla-kit.tgz -C "$fmk" && export PYTHONPATH=$fmk/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
OUT=$out MLA_VARIANTS_GATE=${MLA_VARIANTS_GATE:-MlaGpuPrefill.*} MLA_VARIANTS_GATE_S=${GATE_S:-120} \
  MLA_VARIANTS_BUDGET_S=$((${CALL_S:-470} - (SECONDS - start))) \
  bash scripts/mla-variants.sh run .mla-kit-p.tgz prefill head ${BUILDS:-pr1 orq or} -- none
k=$(mktemp -d)
tar xzf .mla-kit-p.tgz -C "$k"
left=$((${LIMIT_S:-585} - (SECONDS - start) - 5))
(export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 FLASHCPP_GOLDEN_DIR=$k/golden LD_LIBRARY_PATH=$k/${RACE_B:-or}:$k/lib
 timeout $((left > 20 ? left : 20)) compute-sanitizer --tool racecheck --error-exitcode 3 "$k/test_mla_gpu" \
   --gtest_filter='MlaGpuPrefill.MoreTokensThanResidentSlots:MlaGpuPrefill.StridedQueryAndOutput' \
   > "$out/racecheck-${RACE_B:-or}.txt" 2>&1
 echo "racecheck exit $?" >> "$out/racecheck-${RACE_B:-or}.txt")
tail -4 "$out/racecheck-${RACE_B:-or}.txt"
echo "call took $((SECONDS - start)) s"
