#!/usr/bin/env bash
# The twenty-seventh session's prepared call (not run: the session's device time was spent). Three more prefetch builds
# against main at 834d566 (D = docs/gpu-runs/2026-12-07), each twentyseventh-prefetch-next.patch with one switch:
#   rp1  prefill (16-bit, unsplit): each producer thread asks the L2 (prefetch.global.L2, one line an atom row it
#        gathers) for its rows of the next iteration's two tiles at the end of each iteration, every CTA
#   rp2  the same in head group 0's CTA only (its pair's other CTA reads the same rows)
#   fpf  dense decode over the V3.2 FP8 rows (the tile-by-tile FP8 kernels' split work): the tile two ahead, whole,
#        one cp.async.bulk.prefetch.L2 by rank 0's first producer thread, where more than one CTA reads each tile
#        (what landed for the bf16 rows in 37f7a33)
#   qa2  twentyseventh-qatoms2.patch: Q's last two atoms in the consumers' registers (32 a thread), split 240 / 24
#        (ptxas: 64-204 bytes of spills, in the producer at 24 registers most likely; at one atom the patch compiles
#        to main's SASS exactly)
# Kit (ignored), here:
#   MLA_VARIANT_FILES='wgmma_bf16|wgmma_fp8' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-b5 head \
#     rp1=D/twentyseventh-prefetch-next.patch@-DFLASHCPP_EXP_ROW_PREFETCH=1 \
#     rp2=D/twentyseventh-prefetch-next.patch@-DFLASHCPP_EXP_ROW_PREFETCH=2 \
#     fpf=D/twentyseventh-prefetch-next.patch@-DFLASHCPP_EXP_FP8_TILE_PREFETCH=1 \
#     qa2=D/twentyseventh-qatoms2.patch@-DFLASHCPP_EXP_Q_ATOMS=2
# FlashMLA's package (.flashmla-kit.tgz, ignored, never committed): FlashMLA main@9241ae3 built on the CPU machine by
# its own setup.py for sm_90a only (FLASH_MLA_DISABLE_SM100=1), against PyPI's torch 2.11.0 (a CUDA 13 build, the GPU
# image's version) and the CUTLASS commit FlashMLA pins; its BUILD.txt records the rest. Without it the run ranks the
# builds against head alone.
# One device call carrying .mla-kit-b5.tgz and .flashmla-kit.tgz (about 3 minutes of device time):
#   bash docs/gpu-runs/2026-12-07/twentyseventh-next.sh
# Then the tests of whichever gains: MlaGpuPrefill.* and racecheck on the prefill kernels (rp), MlaGpuDenseDecode.*
# (fpf), as twentyseventh-call8 ran them.
set -u
if [[ -f .flashmla-kit.tgz ]]; then
  fm=$(mktemp -d)
  tar xzf .flashmla-kit.tgz -C "$fm"
  export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
fi
MLA_VARIANTS_BUDGET_S=${BUDGET:-400} bash scripts/mla-variants.sh run .mla-kit-b5.tgz prefill,dense head rp1 rp2 fpf qa2 -- none
