#!/usr/bin/env bash
# The nineteenth session's call 3: every MLA GPU test (test_mla_gpu) on main's build in four shards at once, and
# compute-sanitizer racecheck on the prefill kernels beside them.
# Here, first (kit s: kit p's `head`, its libraries and test binary, FlashMLA's golden cases from the project's shared
# data, the V4 ones included):
#   mkdir .mla-kit-s && cp -a .mla-kit-p/{head,lib,test_mla_gpu} .mla-kit-s/ && mkdir .mla-kit-s/golden &&
#   cp -r <shared data>/flashmla-golden/* .mla-kit-s/golden/ && tar czf .mla-kit-s.tgz .mla-kit-s
# Then one device call carrying .mla-kit-s.tgz: bash docs/gpu-runs/2026-12-06/nineteenth-call3-suite.sh
# (The twenty-third session rebuilt kit s the same way from kit w's `head`, main with the branch-free `locate`:
#   cp -a .mla-kit-w/{head,lib,test_mla_gpu} in place of kit p's; see 2026-12-07/twentythird-c1.sh for kit w. The
#   twenty-fourth rebuilt it from main at fd1f748, with the few-heads FP8 dense kernel on by default: head = that
#   build's stripped library, test_mla_gpu with MlaGpuDenseDecode.FewHeadsFp8Kernel, lib with its test hooks.)
set -u
out=${OUT:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
k=$(mktemp -d)
tar xzf .mla-kit-s.tgz -C "$k"
k=$k/.mla-kit-s
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 FLASHCPP_GOLDEN_DIR=$k/golden
for s in 0 1 2 3; do
  LD_LIBRARY_PATH=$k/head:$k/lib GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout "${SHARD_S:-480}" \
    "$k/test_mla_gpu" > "$out/shard$s.txt" 2>&1 &
done
# racecheck beside them on the prefill kernels (d_qk 576 and 512, h_q 64 and 128, strided q and out); the sweep and the
# benchmark-sized shapes do not finish under it.
LD_LIBRARY_PATH=$k/head:$k/lib timeout "${RACE_S:-450}" compute-sanitizer --tool racecheck --error-exitcode 3 \
  "$k/test_mla_gpu" \
  --gtest_filter='MlaGpuPrefill.GoldenCases:MlaGpuPrefill.StridedQueryAndOutput' > "$out/racecheck-prefill.txt" 2>&1
echo "racecheck exit $?" >> "$out/racecheck-prefill.txt"
wait
tail -5 "$out/racecheck-prefill.txt"
for s in 0 1 2 3; do echo "== shard $s"; grep -E '^\[  (PASSED|FAILED|SKIPPED)|FAILED \]|^\[       OK|^\[  SKIPPED' "$out/shard$s.txt"; done
