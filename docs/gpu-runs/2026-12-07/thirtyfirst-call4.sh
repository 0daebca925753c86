#!/usr/bin/env bash
# The thirty-first session's fourth call (the same warm H100 as call 3): every MLA GPU test on `spfa` (kit a,
# thirtyfirst-call1.sh's header), four shards at once and CornerCases in its own process, before it landed.
#   bash docs/gpu-runs/2026-12-07/thirtyfirst-call4.sh   (carry .mla-kit-a.tgz)
set -u
out=${OUT:-$(mktemp -d)}
k=$(mktemp -d); tar xzf .mla-kit-a.tgz -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 FLASHCPP_GOLDEN_DIR=$k/golden
for s in 0 1 2 3; do
  LD_LIBRARY_PATH=$k/spfa:$k/lib GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s GTEST_FILTER='-*CornerCases*' timeout 250 \
    "$k/test_mla_gpu" > "$out/spfa-shard$s.txt" 2>&1 &
done
LD_LIBRARY_PATH=$k/spfa:$k/lib GTEST_FILTER='*CornerCases*' timeout 250 "$k/test_mla_gpu" > "$out/spfa-corner.txt" 2>&1
wait
for f in "$out"/spfa-*.txt; do echo "== $f"; grep -E '^\[  (PASSED|FAILED)|FAILED \]' "$f"; done
