#!/usr/bin/env bash
# The twenty-ninth session's fourth call. Kit .mla-kit-b12.tgz (ignored): main at 8b58b8b (`head`: the pair's L2
# prefetch from rank 0 alone, landed from call 3's `pfr`) and three builds of twentyninth-c1-order.patch, which changes
# consumer 1's order in the pair cluster only (P = docs/gpu-runs/2026-12-07/twentyninth-c1-order.patch):
#   bash scripts/mla-variants.sh build build-gpu-full .mla-kit-b12 head erb=P@-DFLASHCPP_EXP_C1_ORDER=1 \
#     spf=P@-DFLASHCPP_EXP_C1_ORDER=2 spfe=P@-DFLASHCPP_EXP_C1_ORDER=3 \
#     "erba=P@-DFLASHCPP_EXP_C1_ORDER=1 -DFLASHCPP_EXP_C1_ALL=1" "spfa=P@-DFLASHCPP_EXP_C1_ORDER=2 -DFLASHCPP_EXP_C1_ALL=1"
#   erb   P_B published to consumer 0 right after its stores, before consumer 1 waits for P_A (consumer 0's P_B V_B-left,
#         and B-left's release, no longer wait for consumer 1 to receive P_A)
#   spf   P_B stored before its own GEMM is issued (FlashMLA's order in its warpgroup 1)
#   spfe  spf and published at once
#   erba, spfa  erb and spf in every two-tile instantiation (sparse prefill too), timed on FlashMLA's prefill suite
# Steps as twentyninth-call3.sh (the builds' tile-count and graph-replay tests as a gate, then FlashMLA's dense suite;
# the prefill suite for erba and spfa),
# then the landed main's dense tests and compute-sanitizer memcheck and racecheck on its graph replay.
#   bash docs/gpu-runs/2026-12-07/twentyninth-call4.sh   (carry .mla-kit-b12.tgz and .flashmla-kit.tgz)
set -u
out=${OUT:-$(mktemp -d)}
fm=$(mktemp -d)
tar xzf .flashmla-kit.tgz -C "$fm"
export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
k=$(mktemp -d)
tar xzf .mla-kit-b12.tgz -C "$k"
t=$(mktemp -d)
# (The gate ran as a loop here when the call was made; mla-variants.sh's MLA_VARIANTS_GATE does the same since.)
export MLA_VARIANTS_GATE='MlaGpuDenseDecode.EveryTileCountAndCut:MlaGpuDenseDecode.CudaGraphReplayWithNewLengths'
OUT=$out MLA_VARIANTS_BUDGET_S=${TIME_S:-200} bash scripts/mla-variants.sh run .mla-kit-b12.tgz dense head erb spf spfe -- none
mkdir -p "$out/prefill"
OUT=$out/prefill MLA_VARIANTS_BUDGET_S=${PREFILL_S:-220} bash scripts/mla-variants.sh run .mla-kit-b12.tgz prefill head erba spfa -- none
unset MLA_VARIANTS_GATE
(cd "$out" && tar czf prefill.tgz prefill && rm -rf prefill)
# Then head's (the landed main's) dense tests and compute-sanitizer on its graph replay (TESTS=0 skips them).
if [[ ${TESTS:-1} == 1 ]]; then
  ( export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$k/head:$k/lib
    b=$k/test_mla_gpu
    timeout 200 "$b" --gtest_filter='MlaGpuDenseDecode.*:-MlaGpuDenseDecode.CornerCases' > "$t/landed-tests.txt" 2>&1 &
    timeout 200 "$b" --gtest_filter='MlaGpuDenseDecode.CornerCases' > "$t/landed-corner.txt" 2>&1 &
    ( for tool in memcheck racecheck; do
        timeout 95 compute-sanitizer --tool $tool --error-exitcode 3 "$b" \
          --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$t/landed-$tool.txt" 2>&1
        echo "$tool exit $?" >> "$t/landed-$tool.txt"
      done ) &
    wait )
  for f in landed-tests landed-corner landed-memcheck landed-racecheck; do
    echo "== $f"; grep -E '^\[  (PASSED|FAILED)|FAILED \]|^\[       OK|exit|SUMMARY' "$t/$f.txt" | tail -10
  done
  echo "racecheck: hazards in the sparse kernel (pair cluster included): $(grep -c 'Race reported.*sparse_attention_wgmma' "$t/landed-racecheck.txt")"
  (cd "$t" && tar czf "$out/tests.tgz" .)
fi
