# The seventeenth session's third device call as run (bash .call-b.sh with .mla-kit-b.tgz carried: kit b = main at
# aeb8728 as 'head' and docs/gpu-runs/2026-12-06/seventeenth-mma-fast-dequant.patch as 'mmafast').
# One device call: the full test_mla_gpu on kit b's head (main + the evict-last partial rows), compute-sanitizer on
# it, and the FP8 dense rows on the wgmma kernel, the mma.sync kernel and the mma.sync kernel with the fast dequant.
k=$(mktemp -d); tar xzf .mla-kit-b.tgz -C $k
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 FLASHCPP_GOLDEN_DIR=$k/golden LD_LIBRARY_PATH=$k/head:$k/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
for s in 0 1 2 3; do GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout 320 $k/test_mla_gpu > $OUT/tests-$s.txt 2>&1 & done
FLASHCPP_MLA_FP8_KERNEL=mma LD_LIBRARY_PATH=$k/mmafast:$k/lib timeout 200 $k/test_mla_gpu \
  --gtest_filter='MlaGpuDecode.GoldenCases:MlaGpuDecode.Sweep:MlaGpuDenseDecode.CudaGraph*' > $OUT/tests-mmafast.txt 2>&1 &
timeout 300 compute-sanitizer --tool racecheck --error-exitcode 3 $k/test_mla_gpu \
  --gtest_filter='MlaGpuPrefill.*:MlaGpuDecode.GoldenCases' > $OUT/racecheck.txt 2>&1 &
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 $k/test_mla_gpu \
  --gtest_filter='MlaGpuPrefill.GoldenCases:MlaGpuDecode.GoldenCases:MlaGpuDecode.CudaGraphReplay:MlaGpuDenseDecode.CudaGraph*' > $OUT/memcheck.txt 2>&1 &
wait
export PYTHONPATH=$k/py:$PYTHONPATH
f=(--filter "h_q 16" "h_q 32" "dense b 128 s_q 1 h_q 128 s_k 8192 causal False")
for kern in wgmma mma; do
  FLASHCPP_MLA_FP8_KERNEL=$kern timeout 110 python3 bench/flashmla_side_by_side.py --lib $k/head/libflashcpp.so --op dense \
    --iters 10 --no-host-time --no-flashinfer --lib-more mmafast=$k/mmafast/libflashcpp.so "${f[@]}" > $OUT/dense-fp8-$kern.txt 2>&1
  echo "== FP8 kernel $kern (head; mmafast)"; grep '^MLA_SUITE' $OUT/dense-fp8-$kern.txt | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l[10:])
    print(r["kv"], "h_q", r["h_q"], "s_q", r["s_q"], "s_k", r["s_k"], "causal", r["causal"], "us %.1f" % r["flashcpp_us"], "mmafast %.1f" % r.get("flashcpp_mmafast_us", 0), "FlashMLA %.1f" % r.get("flashmla_us", 0), "fp8_speedup", r.get("fp8_speedup"))'
done
grep -hE "^\[  (PASSED|FAILED|SKIPPED)|tests ran|ERROR SUMMARY|RACECHECK SUMMARY" $OUT/*.txt
cd $OUT && tar czf raw.tgz tests-*.txt memcheck.txt racecheck.txt dense-fp8-*.txt && rm -f tests-*.txt memcheck.txt racecheck.txt dense-fp8-*.txt
