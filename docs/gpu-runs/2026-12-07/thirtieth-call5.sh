#!/usr/bin/env bash
# The thirtieth session's fifth call: main after the dense tiles kernel's removal (773c1f2, `head`) and `fa`
# (thirtieth-dense-fp8-alone.patch: dense decode's FP8 split work at 65..128 heads in the two-tile schedule, each head
# group's CTA alone, instead of the pair's tile by tile), one kit (.mla-kit-s.tgz, ignored):
#   MLA_VARIANT_FILES=launch_plan FLASHCPP_GOLDEN_DIR=<shared data>/flashmla-golden bash scripts/mla-variants.sh build \
#     build-gpu-full .mla-kit-s head fa=docs/gpu-runs/2026-12-07/thirtieth-dense-fp8-alone.patch@-DFLASHCPP_EXP_DENSE_FP8_ALONE
#   tar czf .mla-kit-s.tgz .mla-kit-s
# Steps, at once: head's MLA GPU tests in four shards (CornerCases in a process of its own), compute-sanitizer memcheck
# and racecheck on head's dense graph replay, fa's dense gate (tile counts and cuts, graph replay); then FlashMLA's dense
# suite with head and fa in turn (both orders; FlashMLA's package from .flashmla-kit.tgz, ignored, in the same process).
#   bash docs/gpu-runs/2026-12-07/thirtieth-call5.sh   (carry .mla-kit-s.tgz and .flashmla-kit.tgz)
set -u
out=${OUT:-$(mktemp -d)}
k=$(mktemp -d); tar xzf .mla-kit-s.tgz -C "$k"; k=$k/.mla-kit-s
t=$(mktemp -d)
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 FLASHCPP_GOLDEN_DIR=$k/golden
for s in 0 1 2 3; do
  LD_LIBRARY_PATH=$k/head:$k/lib GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout "${SHARD_S:-300}" "$k/test_mla_gpu" \
    --gtest_filter='-MlaGpuDenseDecode.CornerCases' > "$t/shard$s.txt" 2>&1 &
done
LD_LIBRARY_PATH=$k/head:$k/lib timeout "${SHARD_S:-300}" "$k/test_mla_gpu" --gtest_filter='MlaGpuDenseDecode.CornerCases' \
  > "$t/corner.txt" 2>&1 &
LD_LIBRARY_PATH=$k/fa:$k/lib timeout 150 "$k/test_mla_gpu" \
  --gtest_filter='MlaGpuDenseDecode.EveryTileCountAndCut:MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$t/gate-fa.txt" 2>&1 &
( for tool in memcheck racecheck; do
    LD_LIBRARY_PATH=$k/head:$k/lib timeout 140 compute-sanitizer --tool $tool --error-exitcode 3 "$k/test_mla_gpu" \
      --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$t/dense-$tool.txt" 2>&1
    echo "$tool exit $?" >> "$t/dense-$tool.txt"
  done ) &
wait
for f in shard0 shard1 shard2 shard3 corner gate-fa dense-memcheck dense-racecheck; do
  echo "== $f"; grep -E '^\[  (PASSED|FAILED)|FAILED \]|exit|SUMMARY' "$t/$f.txt" | tail -6
done
(cd "$t" && tar czf "$out/tests.tgz" .)
fm=$(mktemp -d); tar xzf .flashmla-kit.tgz -C "$fm"
export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
v=$(mktemp -d); tar czf "$v/kit.tgz" -C "$k" .   # mla-variants.sh takes a kit packed from inside its folder
if grep -q '^\[  PASSED  \] 2 tests' "$t/gate-fa.txt"; then
  OUT=$out MLA_VARIANTS_BUDGET_S=${TIME_S:-200} bash scripts/mla-variants.sh run "$v/kit.tgz" dense head fa -- none
else
  echo "fa failed its gate: not timed"
fi
