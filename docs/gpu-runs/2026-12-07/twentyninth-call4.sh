#!/usr/bin/env bash
# The twenty-ninth session's fourth call. Kit .mla-kit-b12.tgz (ignored): main at 8b58b8b (`head`: the pair's L2
# prefetch from rank 0 alone, landed from call 3's `pfr`) and three builds of twentyninth-c1-order.patch, which changes
# consumer 1's order in the pair cluster only (P = docs/gpu-runs/2026-12-07/twentyninth-c1-order.patch):
#   bash scripts/mla-variants.sh build build-gpu-full .mla-kit-b12 head erb=P@-DFLASHCPP_EXP_C1_ORDER=1 \
#     spf=P@-DFLASHCPP_EXP_C1_ORDER=2 spfe=P@-DFLASHCPP_EXP_C1_ORDER=3
#   erb   P_B published to consumer 0 right after its stores, before consumer 1 waits for P_A (consumer 0's P_B V_B-left,
#         and B-left's release, no longer wait for consumer 1 to receive P_A)
#   spf   P_B stored before its own GEMM is issued (FlashMLA's order in its warpgroup 1)
#   spfe  spf and published at once
# Steps as twentyninth-call3.sh: the builds' tile-count and graph-replay tests as a gate, then FlashMLA's dense suite.
#   bash docs/gpu-runs/2026-12-07/twentyninth-call4.sh   (carry .mla-kit-b12.tgz and .flashmla-kit.tgz)
set -u
out=${OUT:-$(mktemp -d)}
fm=$(mktemp -d)
tar xzf .flashmla-kit.tgz -C "$fm"
export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
k=$(mktemp -d)
tar xzf .mla-kit-b12.tgz -C "$k"
t=$(mktemp -d)
names=(erb spf spfe)
for n in "${names[@]}"; do
  FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$k/$n:$k/lib timeout 90 "$k/test_mla_gpu" \
    --gtest_filter='MlaGpuDenseDecode.EveryTileCountAndCut:MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' \
    > "$t/tests-$n.txt" 2>&1 &
done
wait
ok=()
for n in "${names[@]}"; do
  if grep -q '^\[  PASSED  \] 2 tests' "$t/tests-$n.txt"; then ok+=("$n"); echo "$n: tests pass"; else echo "$n: tests FAILED"; tail -4 "$t/tests-$n.txt"; fi
done
(cd "$t" && tar czf "$out/tests.tgz" .)
OUT=$out MLA_VARIANTS_BUDGET_S=${TIME_S:-240} bash scripts/mla-variants.sh run .mla-kit-b12.tgz dense head "${ok[@]}" -- none
