#!/usr/bin/env bash
# The thirty-first session's first call: every MLA GPU test on main (four shards at once), compute-sanitizer racecheck
# on the prefill kernels and memcheck / racecheck on the dense pair's graph replay.
# Here, first:
#   kit a (ignored): main at 291133d (`head`) and the prepared builds of the thirtieth session (erba, spfa: consumer 1's
#   order, twentyninth-c1-order.patch; tm: the pair launch's tensor map cached, thirtieth-next-tmap-cache.patch):
#     FLASHCPP_GOLDEN_DIR=<shared data>/flashmla-golden bash scripts/mla-variants.sh build build-gpu-full .mla-kit-a head \
#       "erba=P1@-DFLASHCPP_EXP_C1_ORDER=1 -DFLASHCPP_EXP_C1_ALL=1" "spfa=P1@-DFLASHCPP_EXP_C1_ORDER=2 -DFLASHCPP_EXP_C1_ALL=1" \
#       "tm=P2@-DFLASHCPP_EXP_TMAP_CACHE"
# Then one device call carrying .mla-kit-a.tgz:
#   bash docs/gpu-runs/2026-12-07/thirtyfirst-call1.sh
# As run, this call also built FlashMLA main@9241ae3's package beside the tests; that step is not kept:
# the tree builds no fetched code.
set -u
out=${OUT:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
k=$(mktemp -d)
tar xzf .mla-kit-a.tgz -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 FLASHCPP_GOLDEN_DIR=$k/golden
t=$(mktemp -d)
for s in 0 1 2 3; do
  LD_LIBRARY_PATH=$k/head:$k/lib GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout "${SHARD_S:-400}" \
    "$k/test_mla_gpu" > "$t/shard$s.txt" 2>&1 &
done
(LD_LIBRARY_PATH=$k/head:$k/lib timeout "${RACE_S:-420}" compute-sanitizer --tool racecheck --error-exitcode 3 \
  "$k/test_mla_gpu" --gtest_filter='MlaGpuPrefill.GoldenCases:MlaGpuPrefill.StridedQueryAndOutput' \
  > "$t/racecheck-prefill.txt" 2>&1; echo "racecheck exit $?" >> "$t/racecheck-prefill.txt") &
for tool in memcheck racecheck; do
  (LD_LIBRARY_PATH=$k/head:$k/lib timeout "${SAN_S:-200}" compute-sanitizer --tool $tool --error-exitcode 3 \
    "$k/test_mla_gpu" --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$t/dense-$tool.txt" 2>&1
  echo "$tool exit $?" >> "$t/dense-$tool.txt") &
done
wait
(cd "$t" && tar czf "$out/tests.tgz" .)
tail -3 "$t/racecheck-prefill.txt" "$t"/dense-*.txt
for s in 0 1 2 3; do echo "== shard $s"; grep -E '^\[  (PASSED|FAILED|SKIPPED)|FAILED \]|^\[       OK|^\[  SKIPPED' "$t/shard$s.txt"; done
