#!/usr/bin/env bash
# The twenty-ninth session's second call. Kit .mla-kit-b10.tgz (ignored): main at 0cba34f (`head`: the pair cluster
# without the mask on whole tiles, S scaled in the exponentials' FFMA) and two builds of twentyninth-pair-next.patch
# (P = docs/gpu-runs/2026-12-07/twentyninth-pair-next.patch):
#   bash scripts/mla-variants.sh build build-gpu-full .mla-kit-b10 head pab=P@-DFLASHCPP_EXP_ATOM_BARS=1 \
#     npf=P@-DFLASHCPP_EXP_NO_PAIR_PREFETCH=1
#   pab  the pair cluster's per-atom full barriers (call 1's pab, now on head)
#   npf  the pair cluster without the L2 bulk prefetch of the next iteration's tiles (TMA loads them whole anyway)
# Steps: the builds on FlashMLA's dense suite beside FlashMLA (both orders); head's dense tests (CornerCases in a
# process of its own, it takes ~220 s) and compute-sanitizer memcheck and racecheck on its graph replay; then
# (kit .mla-kit-b6.tgz, twentyeighth-next.sh) the prefill builds rp1 and qa2 beside their head and FlashMLA.
#   bash docs/gpu-runs/2026-12-07/twentyninth-call2.sh   (carry .mla-kit-b10.tgz, .mla-kit-b6.tgz, .flashmla-kit.tgz)
set -u
out=${OUT:-$(mktemp -d)}
fm=$(mktemp -d)
tar xzf .flashmla-kit.tgz -C "$fm"
export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
OUT=$out MLA_VARIANTS_BUDGET_S=${TIME_S:-120} bash scripts/mla-variants.sh run .mla-kit-b10.tgz dense head pab npf -- none
k=$(mktemp -d)
tar xzf .mla-kit-b10.tgz -C "$k"
t=$(mktemp -d)
( export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$k/head:$k/lib
  T=${TEST_S:-240}
  b=$k/test_mla_gpu
  timeout "$T" "$b" --gtest_filter='MlaGpuDenseDecode.*:-MlaGpuDenseDecode.CornerCases' > "$t/tests-head.txt" 2>&1 &
  timeout "$T" "$b" --gtest_filter='MlaGpuDenseDecode.CornerCases' > "$t/tests-head-corner.txt" 2>&1 &
  ( for tool in memcheck racecheck; do
      timeout 110 compute-sanitizer --tool $tool --error-exitcode 3 "$b" \
        --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$t/$tool.txt" 2>&1
      echo "$tool exit $?" >> "$t/$tool.txt"
    done ) &
  wait )
for f in tests-head tests-head-corner memcheck racecheck; do
  echo "== $f"; grep -E '^\[  (PASSED|FAILED)|FAILED \]|^\[       OK|exit|SUMMARY' "$t/$f.txt" | tail -14
done
echo "racecheck: hazards in the sparse kernel (pair cluster included): $(grep -c 'Race reported.*sparse_attention_wgmma' "$t/racecheck.txt")"
(cd "$t" && tar czf "$out/tests.tgz" .)
if [[ -f .mla-kit-b6.tgz && ${PREFILL:-1} == 1 ]]; then
  mkdir -p "$out/prefill"
  OUT=$out/prefill MLA_VARIANTS_BUDGET_S=${PREFILL_S:-150} bash scripts/mla-variants.sh run .mla-kit-b6.tgz prefill head rp1 qa2 -- none
  (cd "$out" && tar czf prefill.tgz prefill && rm -rf prefill)
fi
