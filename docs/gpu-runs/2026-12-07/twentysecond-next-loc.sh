#!/usr/bin/env bash
# The twenty-second session's prepared measurement (no device time was left to run it): the FP8 producer's row
# addresses without a branch (`loc`, twentysecond-loc.patch) and with FastDivmod::div branch-free too (`loc2`,
# twentysecond-loc2.patch, which contains `loc`), and dense decode's tile rows from the tile's first index (`dfirst`,
# twentysecond-dfirst.patch, which contains `loc2`), against main's build in one process, then the decode and dense GPU
# tests on `dfirst` (every change of the three).
# Here, first (from a configured and built tree of main, e.g. build-gpu-full):
#   MLA_VARIANT_FILES='wgmma_fp8|mma_sm90' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-t head \
#     loc=docs/gpu-runs/2026-12-07/twentysecond-loc.patch loc2=docs/gpu-runs/2026-12-07/twentysecond-loc2.patch \
#     dfirst=docs/gpu-runs/2026-12-07/twentysecond-dfirst.patch
# Then one device call carrying .mla-kit-t.tgz (about 5 minutes): bash docs/gpu-runs/2026-12-07/twentysecond-next-loc.sh
set -u
out=${OUT:-$(mktemp -d)}
k=$(mktemp -d)
tar xzf .mla-kit-t.tgz -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$k/lib PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
more="loc=$k/loc/libflashcpp.so loc2=$k/loc2/libflashcpp.so dfirst=$k/dfirst/libflashcpp.so"
# shellcheck disable=SC2086
timeout 90 python3 bench/flashmla_side_by_side.py --lib "$k/head/libflashcpp.so" --op dense --iters 10 --no-host-time \
  --no-flashinfer --filter "dense tp" "s_q 1 h_q 128 s_k 8192 causal False" --lib-more $more > "$out/dense.txt" 2>&1
# shellcheck disable=SC2086
timeout 150 python3 bench/flashmla_side_by_side.py --lib "$k/head/libflashcpp.so" --op decode --iters 10 --no-host-time \
  --no-flashinfer --lib-more $more > "$out/decode.txt" 2>&1
for f in dense decode; do
  grep '^MLA_SUITE' "$out/$f.txt" | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line.split(" ", 1)[1])
    print(d["op"], d.get("h_q"), d.get("b"), d.get("d_qk"), d.get("kv", ""),
          {k: round(v, 4) for k, v in d.items() if k.endswith("_speedup")})'
done
for s in 0 1 2 3; do
  LD_LIBRARY_PATH=$k/dfirst:$LD_LIBRARY_PATH GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout 200 "$k/test_mla_gpu" \
    --gtest_filter='MlaGpuDecode*:MlaGpuDenseDecode*' > "$out/tests-$s.txt" 2>&1 &
done
wait
for s in 0 1 2 3; do grep -E '^\[  (PASSED|FAILED)|FAILED \]' "$out/tests-$s.txt"; done
