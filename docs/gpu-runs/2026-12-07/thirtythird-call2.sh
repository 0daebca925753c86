#!/usr/bin/env bash
# The thirty-third session's second call (prepared, not run): build B of kit n (default head) through every MLA GPU
# test (four shards at once),
# compute-sanitizer racecheck on the prefill kernels and memcheck / racecheck on the dense pair's graph replay, then
# FlashMLA's suites (OPS, default "prefill dense decode") beside B in one process on the same tensors.
# Here: kit n as thirtythird-call1.sh says. One device call carrying .mla-kit-n.tgz and .flashmla-kit.tgz (FlashMLA
# main@9241ae3's package):
#   B=head bash docs/gpu-runs/2026-12-07/thirtythird-call2.sh
set -u
start=$SECONDS
out=${OUT:-$(mktemp -d)}
b=${B:-head}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
k=$(mktemp -d)
tar xzf .mla-kit-n.tgz -C "$k"
[[ -d $k/$b ]] || { echo "no build $b in the kit"; exit 2; }
(
  export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 FLASHCPP_GOLDEN_DIR=$k/golden
  export LD_LIBRARY_PATH=$k/$b:$k/lib
  t=$(mktemp -d)
  for s in 0 1 2 3; do
    GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout "${SHARD_S:-390}" "$k/test_mla_gpu" > "$t/shard$s.txt" 2>&1 &
  done
  (timeout "${RACE_S:-390}" compute-sanitizer --tool racecheck --error-exitcode 3 "$k/test_mla_gpu" \
    --gtest_filter='MlaGpuPrefill.GoldenCases:MlaGpuPrefill.StridedQueryAndOutput' > "$t/racecheck-prefill.txt" 2>&1
  echo "racecheck exit $?" >> "$t/racecheck-prefill.txt") &
  for tool in memcheck racecheck; do
    (timeout "${SAN_S:-200}" compute-sanitizer --tool $tool --error-exitcode 3 "$k/test_mla_gpu" \
      --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$t/dense-$tool.txt" 2>&1
    echo "$tool exit $?" >> "$t/dense-$tool.txt") &
  done
  wait
  (cd "$t" && tar czf "$out/tests.tgz" .)
  for s in 0 1 2 3; do echo "shard $s: $(grep -cE '^\[       OK \]' "$t/shard$s.txt") ok, $(grep -cE '^\[  FAILED  \]' "$t/shard$s.txt") failed lines, last: $(tail -1 "$t/shard$s.txt" | cut -c1-100)"; done
  tail -3 "$t/racecheck-prefill.txt" "$t"/dense-*.txt
)
# FlashMLA's suites on B: twentyseventh-suites.sh reads kit s's layout, made here from kit n's B.
mkdir -p "$k/s/.mla-kit-s" && cp -a "$k/$b" "$k/s/.mla-kit-s/head" && cp -a "$k/lib" "$k/s/.mla-kit-s/" &&
  (cd "$k/s" && tar czf "$OLDPWD/.mla-kit-s.tgz" .mla-kit-s)
OUT=$out OPS=${OPS:-prefill dense decode} bash docs/gpu-runs/2026-12-07/twentyseventh-suites.sh
echo "call took $((SECONDS - start)) s"
