#!/usr/bin/env bash
# The twenty-eighth session's check of the landed pair cluster (b15aaa1): every dense-decode GPU test in two shards,
# compute-sanitizer racecheck and memcheck on the graph-replay test (which now also captures the default dispatch,
# the pair cluster), then FlashMLA's dense suite beside it. Kit .mla-kit-b7.tgz (ignored): main at b15aaa1,
#   bash scripts/mla-variants.sh build build-gpu-full .mla-kit-b7 head
# and FlashMLA's package .flashmla-kit.tgz (ignored; twentyseventh-next.sh says how it was built). One call carrying
# both: bash docs/gpu-runs/2026-12-07/twentyeighth-landed.sh
set -u
out=${OUT:-$(mktemp -d)}
k=$(mktemp -d)
tar xzf .mla-kit-b7.tgz -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$k/head:$k/lib
T=${TEST_S:-300}
timeout "$T" "$k/test_mla_gpu" --gtest_filter='MlaGpuDenseDecode.FlashMlaCorrectnessGrid' > "$out/tests-grid.txt" 2>&1 &
timeout "$T" "$k/test_mla_gpu" --gtest_filter='MlaGpuDenseDecode.*:-MlaGpuDenseDecode.FlashMlaCorrectnessGrid' \
  > "$out/tests-rest.txt" 2>&1 &
( for tool in racecheck memcheck; do
    timeout 140 compute-sanitizer --tool $tool --error-exitcode 3 "$k/test_mla_gpu" \
      --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$out/$tool.txt" 2>&1
    echo "$tool exit $?" >> "$out/$tool.txt"
  done ) &
wait
for f in tests-grid tests-rest racecheck memcheck; do
  echo "== $f"; grep -E '^\[  (PASSED|FAILED)|FAILED \]|^\[       OK|exit|SUMMARY' "$out/$f.txt" | tail -14
done
echo "hazards in the sparse kernel (pair cluster included): $(grep -c 'Race reported.*sparse_attention_wgmma' "$out/racecheck.txt")"
if [[ -f .flashmla-kit.tgz ]]; then
  fm=$(mktemp -d)
  tar xzf .flashmla-kit.tgz -C "$fm"
  export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
fi
OUT=$out MLA_VARIANTS_BUDGET_S=${BUDGET:-120} bash scripts/mla-variants.sh run .mla-kit-b7.tgz dense head head -- none
# PREFILL=1 (with .mla-kit-b6.tgz carried too): the prefill builds of kit b6 beside main and FlashMLA (twentyeighth-next.sh).
if [[ ${PREFILL:-0} == 1 && -f .mla-kit-b6.tgz ]]; then
  OUT=$out/prefill MLA_VARIANTS_BUDGET_S=${PREFILL_BUDGET:-100} bash scripts/mla-variants.sh run .mla-kit-b6.tgz prefill head rp1 qa2 -- none
fi
