#!/usr/bin/env bash
# The thirty-third session's first call: FlashMLA main@9241ae3's package built on the GPU machine (unless
# .flashmla-kit.tgz is carried or left by an earlier call on the warm machine), then the L2 prefetch builds of the
# unsplit 16-bit prefill timed against main on FlashMLA's prefill suite, FlashMLA in the rotation, one process, the
# same tensors, both orders, after a gate of the prefill golden tests on every build:
#   np1-np3: the next CTA's first reads (thirtysecond-next-prefetch.patch, FLASHCPP_EXP_NEXT_PREFETCH);
#   kvp1-kvp3: the next iteration's gathered rows, a bulk prefetch a row, at the iteration's end, after its second
#   step, after its first (thirtythird-kv-prefetch.patch, FLASHCPP_EXP_KV_PREFETCH).
# Here, first (kit n, ignored):
#   P1=docs/gpu-runs/2026-12-07/thirtysecond-next-prefetch.patch P2=docs/gpu-runs/2026-12-07/thirtythird-kv-prefetch.patch
#   FLASHCPP_GOLDEN_DIR=<shared data>/flashmla-golden bash scripts/mla-variants.sh build build-gpu-full .mla-kit-n head \
#     "np1=$P1@-DFLASHCPP_EXP_NEXT_PREFETCH=1" "np2=$P1@-DFLASHCPP_EXP_NEXT_PREFETCH=2" "np3=$P1@-DFLASHCPP_EXP_NEXT_PREFETCH=3" \
#     "kvp1=$P2@-DFLASHCPP_EXP_KV_PREFETCH=1" "kvp2=$P2@-DFLASHCPP_EXP_KV_PREFETCH=2" "kvp3=$P2@-DFLASHCPP_EXP_KV_PREFETCH=3"
#   .flashmla-src.tgz as thirtysecond-suites.sh says.
# Then one device call carrying .mla-kit-n.tgz and .flashmla-src.tgz:
#   bash docs/gpu-runs/2026-12-07/thirtythird-call1.sh
# FlashMLA's package comes back as flashmla-kit.tgz and stays in the tree as .flashmla-kit.tgz while the machine is warm.
set -u
start=$SECONDS
out=${OUT:-$(mktemp -d)}
if [[ ! -f .flashmla-kit.tgz ]]; then
  fm=$(mktemp -d)
  tar xzf .flashmla-src.tgz -C "$fm"
  cuda=$(dirname "$(dirname "$(command -v nvcc)")")  # CUDA 13 keeps libcu++ under include/cccl
  (cd "$fm/FlashMLA" &&
    FLASH_MLA_DISABLE_SM100=1 MAX_JOBS=16 CPLUS_INCLUDE_PATH=$cuda/include/cccl \
      timeout "${BUILD_S:-300}" python3 setup.py build_ext --inplace > "$fm/build.txt" 2>&1
  echo "flashmla build exit $? after $((SECONDS - start)) s" >> "$fm/build.txt")
  tail -2 "$fm/build.txt" | tee "$out/flashmla-build.txt"
  mkdir -p "$fm/kit/.flashmla-kit" && cp -r "$fm/FlashMLA/flash_mla" "$fm/kit/.flashmla-kit/" &&
    (cd "$fm/kit" && tar czf "$out/flashmla-kit.tgz" .flashmla-kit) && cp "$out/flashmla-kit.tgz" .flashmla-kit.tgz
fi
fmk=$(mktemp -d)
tar xzf .flashmla-kit.tgz -C "$fmk" && export PYTHONPATH=$fmk/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
OUT=$out MLA_VARIANTS_GATE=${MLA_VARIANTS_GATE:-MlaGpuPrefill.GoldenCases:MlaGpuPrefill.StridedQueryAndOutput} \
  MLA_VARIANTS_BUDGET_S=$((${CALL_S:-585} - (SECONDS - start))) \
  bash scripts/mla-variants.sh run .mla-kit-n.tgz prefill head ${BUILDS:-np1 np2 np3 kvp1 kvp2 kvp3} -- none
