#!/usr/bin/env bash
# The twenty-fourth session's device call for the few-heads FP8 dense decode kernel (dense_decode_mma_fp8.cu), kit x
# built here from main's tree with the kernel (a configured build-gpu-full):
#   cmake --build build-gpu-full --target flashcpp test_mla_gpu &&
#   MLA_VARIANT_FILES='dense_decode_mma_fp8' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-x x
#   (KIT/x/: the library; KIT/lib: its dependencies and the test hooks; KIT/test_mla_gpu)
# One call carrying .mla-kit-x.tgz: bash docs/gpu-runs/2026-12-07/twentyfourth-fewheads.sh
#   1. the kernel's GPU tests (FewHeadsFp8Kernel) and FlashMLA's dense grid and corner cases with
#      FLASHCPP_MLA_DENSE_KERNEL=mma (its h_q 1, 3 and 9 FP8 cases run the kernel), four processes at once;
#   2. FlashMLA's dense suite's tensor-parallel rows (h_q 16 and 32) and its s_q 1 / 4K rows, the kernel (--lib, mma)
#      against the gather kernels (--lib-b, gather) in turn on the same tensors; FlashMLA beside them when importable.
set -u
out=${OUT:-$(mktemp -d)}
k=$(mktemp -d)
tar xzf .mla-kit-x.tgz -C "$k"
[[ -d $k/.mla-kit-x ]] && k=$k/.mla-kit-x  # as tarred here; mla-variants.sh's own tgz has no folder
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
run_tests() {  # name, seconds, env..., -- gtest args
  local name=$1 secs=$2
  shift 2
  env LD_LIBRARY_PATH=$k/x:$k/lib "$@" > "$out/tests-$name.txt" 2>&1 &
}
run_tests fewheads "${TEST_S:-200}" timeout "${TEST_S:-200}" "$k/test_mla_gpu" --gtest_filter='MlaGpuDenseDecode.FewHeadsFp8Kernel'
for s in 0 1 2; do
  run_tests grid$s 200 FLASHCPP_MLA_DENSE_KERNEL=mma GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$s timeout 200 \
    "$k/test_mla_gpu" --gtest_filter='MlaGpuDenseDecode.FlashMlaCorrectnessGrid:MlaGpuDenseDecode.CornerCases'
done
wait
for f in "$out"/tests-*.txt; do
  echo "== $(basename "$f"): $(grep -cE '^\[       OK' "$f") ok"
  grep -E '^\[  (PASSED|FAILED)|FAILED \]|Failure|error' "$f" | head -20
done
LD_LIBRARY_PATH=$k/lib timeout "${BENCH_S:-200}" python3 bench/flashmla_side_by_side.py --op dense --iters 10 --no-host-time \
  --no-flashinfer --lib "$k/x/libflashcpp.so" --lib-env FLASHCPP_MLA_DENSE_KERNEL=mma --lib-b "$k/x/libflashcpp.so" \
  --lib-b-env FLASHCPP_MLA_DENSE_KERNEL=gather --filter "dense tp" "s_q 1 h_q 128 s_k 4096 causal False" \
  > "$out/dense.txt" 2>&1
echo "bench exit $?"
grep '^MLA_SUITE' "$out/dense.txt" | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line.split(" ", 1)[1])
    print(d["h_q"], d["s_k"], d["kv"], "ours", round(d["flashcpp_us"], 1), "gather", round(d.get("flashcpp_b_us", 0), 1),
          "fp8_speedup", round(d.get("fp8_speedup", 0), 3), "copy", round(d["copy_fraction"], 3),
          "b_diff", d.get("b_max_abs_diff"), "flashmla", round(d.get("flashmla_us", 0), 1), "diff", d.get("max_abs_diff"))'
tail -5 "$out/dense.txt"
