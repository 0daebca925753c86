#!/usr/bin/env bash
# The twenty-seventh session's prepared call (not run: the session's device time was spent). Builds against main at
# 834d566 (D = docs/gpu-runs/2026-12-07), each a patch of D with one switch:
#   rp1  prefill (16-bit, unsplit): each producer thread asks the L2 (prefetch.global.L2, one line an atom row it
#        gathers) for its rows of the next iteration's two tiles at the end of each iteration, every CTA
#        (twentyseventh-prefetch-next.patch, -DFLASHCPP_EXP_ROW_PREFETCH=1)
#   rp2  the same in head group 0's CTA only (its pair's other CTA reads the same rows) (=2)
#   fpf  dense decode over the V3.2 FP8 rows (the tile-by-tile FP8 kernels' split work): the tile two ahead, whole,
#        one cp.async.bulk.prefetch.L2 by rank 0's first producer thread, where more than one CTA reads each tile
#        (what landed for the bf16 rows in 37f7a33) (-DFLASHCPP_EXP_FP8_TILE_PREFETCH=1)
#   qa2  Q's last two atoms in the consumers' registers (32 a thread), split 240 / 24 (ptxas: 64-204 bytes of
#        spills; at one atom the patch compiles to main's SASS exactly) (twentyseventh-qatoms2.patch, -DFLASHCPP_EXP_Q_ATOMS=2)
#   tmc  dense decode, bf16, two head groups of 64 (h_q 65..128): the two CTAs of a token as a 2-CTA cluster, every
#        whole dense tile (64 consecutive rows within the token's length) by TMA boxes of 64 rows x 64 columns, each
#        CTA issuing half of a half tile's atoms multicast into both, so a tile crosses the L2 once a token instead of
#        once a head group (dense s_q 1 moved ~4.7 TB/s and s_q 2 ~5 TB/s from the L2 into shared memory: the L2's
#        bound); partial tiles by the gather (twentyseventh-dense-tile-multicast.patch, built on the eighteenth
#        session's cluster of row boxes, -DFLASHCPP_EXP_TMA_ROWS). Never run: its dense tests and racecheck below.
# Kit (ignored), here:
#   MLA_VARIANT_FILES='wgmma' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-b5 head \
#     rp1=D/twentyseventh-prefetch-next.patch@-DFLASHCPP_EXP_ROW_PREFETCH=1 \
#     rp2=D/twentyseventh-prefetch-next.patch@-DFLASHCPP_EXP_ROW_PREFETCH=2 \
#     fpf=D/twentyseventh-prefetch-next.patch@-DFLASHCPP_EXP_FP8_TILE_PREFETCH=1 \
#     qa2=D/twentyseventh-qatoms2.patch@-DFLASHCPP_EXP_Q_ATOMS=2 \
#     tmc=D/twentyseventh-dense-tile-multicast.patch@-DFLASHCPP_EXP_TMA_ROWS
#   (tmc changes the kernels' parameter block, so every wgmma translation unit is rebuilt: MLA_VARIANT_FILES 'wgmma')
# FlashMLA's package (.flashmla-kit.tgz, ignored, never committed): FlashMLA main@9241ae3 built on the CPU machine by
# its own setup.py for sm_90a only (FLASH_MLA_DISABLE_SM100=1), against PyPI's torch 2.11.0 (a CUDA 13 build, the GPU
# image's version) and the CUTLASS commit FlashMLA pins; its BUILD.txt records the rest. Without it the run ranks the
# builds against head alone.
# One device call carrying .mla-kit-b5.tgz and .flashmla-kit.tgz (about 6-8 minutes of device time):
#   bash docs/gpu-runs/2026-12-07/twentyseventh-next.sh
# TMC_TESTS=0 skips tmc's tests; TIMING=0 runs only them. Few files come back: device.txt, the summaries, raw.tgz,
# tmc-tests.txt, tmc-racecheck.txt.
set -u
out=${OUT:-$(mktemp -d)}
if [[ -f .flashmla-kit.tgz ]]; then
  fm=$(mktemp -d)
  tar xzf .flashmla-kit.tgz -C "$fm"
  export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
fi
if [[ ${TIMING:-1} == 1 ]]; then
  MLA_VARIANTS_BUDGET_S=${BUDGET:-330} bash scripts/mla-variants.sh run .mla-kit-b5.tgz prefill,dense head rp1 rp2 fpf qa2 tmc \
    -- none
fi
if [[ ${TMC_TESTS:-1} == 1 ]]; then
  k=$(mktemp -d)
  tar xzf .mla-kit-b5.tgz -C "$k"
  K=$k/.mla-kit-b5
  export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$K/tmc:$K/lib
  timeout "${TEST_S:-200}" "$K/test_mla_gpu" --gtest_filter='MlaGpuDenseDecode.FlashMlaCorrectnessGrid:MlaGpuDenseDecode.EveryTileCountAndCut:MlaGpuDenseDecode.CudaGraphReplayWithNewLengths:MlaGpuDenseDecode.Fp16Cache' \
    > "$out/tmc-tests.txt" 2>&1 &
  timeout "${RACE_S:-200}" compute-sanitizer --tool racecheck --error-exitcode 3 "$K/test_mla_gpu" \
    --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$out/tmc-racecheck.txt" 2>&1
  echo "racecheck exit $?" >> "$out/tmc-racecheck.txt"
  wait
  grep -E '^\[  (PASSED|FAILED)|FAILED \]|^\[       OK' "$out/tmc-tests.txt"
  tail -3 "$out/tmc-racecheck.txt"
fi
