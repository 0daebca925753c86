#!/usr/bin/env bash
# The twenty-eighth session's first call: dense decode's whole tiles multicast by TMA, in clusters of two and four
# CTAs, beside main and FlashMLA on FlashMLA's dense suite, with their dense tests and racecheck; then (PART=prefill)
# the prefill builds. Kit .mla-kit-b6.tgz (ignored), built against main at 02e15d2 (D = docs/gpu-runs/2026-12-07):
#   MLA_VARIANT_FILES='wgmma|dense_decode\.cpp' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-b6 head \
#     tmc=D/twentyeighth-dense-cluster4.patch@-DFLASHCPP_EXP_TMA_ROWS=1 \
#     tmc4=D/twentyeighth-dense-cluster4.patch@-DFLASHCPP_EXP_TMA_ROWS=4 \
#     fpf=D/twentyseventh-prefetch-next.patch@-DFLASHCPP_EXP_FP8_TILE_PREFETCH=1 \
#     rp1=D/twentyseventh-prefetch-next.patch@-DFLASHCPP_EXP_ROW_PREFETCH=1 \
#     qa2=D/twentyseventh-qatoms2.patch@-DFLASHCPP_EXP_Q_ATOMS=2
#   tmc   the twenty-seventh session's build (twentyseventh-dense-tile-multicast.patch, never run): dense bf16 at 65-128
#         heads, the two head-group CTAs of a token as a 2-CTA cluster, every whole dense tile (64 consecutive cache
#         rows within the token's length) by TMA boxes of 64 rows x 64 columns multicast into both; partial tiles by
#         the gather. Here its whole-tile test reads row 0 from every thread's own first row (index - group), so all
#         producer threads agree at the cache's last rows.
#   tmc4  the same with s_q 2 as 4-CTA clusters (a request's two tokens x two head groups, the same part): both tokens
#         run the longer one's tiles (the shorter one's extra slots masked by its own length), a tile is whole when
#         it is for the shorter token, and each CTA issues the atoms a % 4 == its rank, multicast to all four; the
#         plan's parts are capped at the 4-CTA clusters resident at once (a part is a cluster).
#   fpf, rp1, qa2 as in twentyseventh-next.sh (FP8 tile prefetch; prefill row prefetch; Q's two last atoms in registers).
# FlashMLA's package: .flashmla-kit.tgz (ignored, never committed; twentyseventh-next.sh says how it was built).
# Call 1 (carry .mla-kit-b6.tgz and .flashmla-kit.tgz): bash docs/gpu-runs/2026-12-07/twentyeighth-next.sh
# Call 2: PART=prefill bash docs/gpu-runs/2026-12-07/twentyeighth-next.sh
set -u
out=${OUT:-$(mktemp -d)}
if [[ -f .flashmla-kit.tgz ]]; then
  fm=$(mktemp -d)
  tar xzf .flashmla-kit.tgz -C "$fm"
  export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
fi
if [[ ${PART:-dense} == prefill ]]; then
  OUT=$out MLA_VARIANTS_BUDGET_S=${BUDGET:-400} bash scripts/mla-variants.sh run .mla-kit-b6.tgz prefill head rp1 qa2 -- none
  exit 0
fi
k=$(mktemp -d)
tar xzf .mla-kit-b6.tgz -C "$k"
if [[ ${TESTS:-1} == 1 ]]; then
  # The multicast builds' dense tests first (a wrong answer or a hang says more than a time).
  ( export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$k/tmc4:$k/lib
    F='MlaGpuDenseDecode.FlashMlaCorrectnessGrid:MlaGpuDenseDecode.EveryTileCountAndCut:MlaGpuDenseDecode.CornerCases:MlaGpuDenseDecode.CudaGraphReplayWithNewLengths'
    timeout "${TEST_S:-150}" "$k/test_mla_gpu" --gtest_filter="$F" > "$out/tmc4-tests.txt" 2>&1
    echo "exit $?" >> "$out/tmc4-tests.txt"
    LD_LIBRARY_PATH=$k/tmc:$k/lib timeout "${TEST_S:-150}" "$k/test_mla_gpu" --gtest_filter="$F" > "$out/tmc-tests.txt" 2>&1
    echo "exit $?" >> "$out/tmc-tests.txt" ) &
  ( export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$k/tmc4:$k/lib
    timeout "${RACE_S:-150}" compute-sanitizer --tool racecheck --error-exitcode 3 "$k/test_mla_gpu" \
      --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$out/tmc4-racecheck.txt" 2>&1
    echo "racecheck exit $?" >> "$out/tmc4-racecheck.txt" ) &
  wait
  for f in tmc4-tests tmc-tests tmc4-racecheck; do
    echo "== $f"; grep -E '^\[  (PASSED|FAILED)|FAILED \]|^\[       OK|exit' "$out/$f.txt" | tail -12
  done
  tail -3 "$out/tmc4-racecheck.txt"
fi
if [[ ${TIMING:-1} == 1 ]]; then
  # A build whose tests did not pass (or hung) is not timed.
  names=(head)
  for n in tmc tmc4; do
    if [[ ${TESTS:-1} != 1 ]] || { grep -q "^\[  PASSED" "$out/$n-tests.txt" && ! grep -q "^\[  FAILED" "$out/$n-tests.txt"; }; then names+=("$n"); else echo "(not timing $n)"; fi
  done
  names+=(fpf)
  OUT=$out MLA_VARIANTS_BUDGET_S=${BUDGET:-300} bash scripts/mla-variants.sh run .mla-kit-b6.tgz dense "${names[@]}" -- none
fi
