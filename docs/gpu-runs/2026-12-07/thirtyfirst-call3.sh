#!/usr/bin/env bash
# The thirty-first session's third call: consumer 1 storing P_B before issuing its own P V (`spfa`, FlashMLA's
# warpgroup-1 order, in every two-tile instantiation; 0.996 of main's prefill time in call 2, both orders) checked
# before landing: FlashMLA's prefill suite again with head and spfa in turn, three runs alternating which goes first,
# then compute-sanitizer racecheck on spfa's prefill kernels and on the dense pair's graph replay (kit a,
# thirtyfirst-call1.sh's header).
#   bash docs/gpu-runs/2026-12-07/thirtyfirst-call3.sh   (carry .mla-kit-a.tgz)
set -u
out=${OUT:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
k=$(mktemp -d); tar xzf .mla-kit-a.tgz -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 PYTHONUNBUFFERED=1 FLASHCPP_GOLDEN_DIR=$k/golden
runs=()
for i in 1 2 3; do
  first=$([[ $i == 2 ]] && echo head || echo spfa)
  other=$([[ $first == spfa ]] && echo head || echo spfa)
  LD_LIBRARY_PATH=$k/lib timeout 90 python3 bench/flashmla_side_by_side.py --lib "$k/$first/libflashcpp.so" \
    --lib-more "$other=$k/$other/libflashcpp.so" --op prefill --iters 10 --no-flashinfer --no-host-time \
    > "$out/prefill-run$i-$first-first.txt" 2>&1 || echo "(run $i: exit $?)"
  runs+=("$out/prefill-run$i-$first-first.txt:$first")
done
python3 bench/mla_suite_summary.py "${runs[@]}" 2>&1 | tee "$out/prefill-summary.txt" | tail -12
(LD_LIBRARY_PATH=$k/spfa:$k/lib timeout "${RACE_S:-300}" compute-sanitizer --tool racecheck --error-exitcode 3 \
  "$k/test_mla_gpu" --gtest_filter='MlaGpuPrefill.GoldenCases:MlaGpuPrefill.StridedQueryAndOutput' \
  > "$out/racecheck-prefill.txt" 2>&1; echo "racecheck exit $?" >> "$out/racecheck-prefill.txt") &
(LD_LIBRARY_PATH=$k/spfa:$k/lib timeout "${RACE_S:-300}" compute-sanitizer --tool racecheck --error-exitcode 3 \
  "$k/test_mla_gpu" --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' \
  > "$out/racecheck-dense.txt" 2>&1; echo "racecheck exit $?" >> "$out/racecheck-dense.txt") &
wait
tail -4 "$out/racecheck-prefill.txt" "$out/racecheck-dense.txt"
