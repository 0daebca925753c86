#!/usr/bin/env bash
# The twenty-third session's device calls for consumer 1 dequantizing a share of the right half. Kits, built here from
# a configured and built tree of main (docs/gpu-runs/2026-12-07 = D):
#   u (run): MLA_VARIANT_FILES='wgmma_fp8' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-u head \
#              c1a=D/twentythird-c1a.patch c1b=D/twentythird-c1b.patch
#   w (next): MLA_VARIANT_FILES='wgmma_fp8' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-w head \
#              c1c=D/twentythird-c1c.patch c1d=D/twentythird-c1d.patch c1e=D/twentythird-c1e.patch \
#              c1g=D/twentythird-c1g.patch lalone=D/twentythird-lalone.patch
#   then: KIT=.mla-kit-w.tgz VARIANTS="c1c c1d c1e c1g lalone" TEST_VARIANT=c1g bash D/twentythird-c1.sh both
#   bash twentythird-c1.sh bench   dense and decode suites (head and the variants in one process), then FP8-cache
#                                  prefill with head and with $TEST_VARIANT (default c1a) in turn
#   bash twentythird-c1.sh tests   the decode and dense GPU tests on $TEST_VARIANT in six shards
#   bash twentythird-c1.sh both    bench, then tests if $TEST_VARIANT won at dense FP8 16 heads (see the end)
set -u
mode=$1
kit_tgz=${KIT:-.mla-kit-u.tgz}
variants=${VARIANTS:-c1a c1b}
tv=${TEST_VARIANT:-c1a}
out=${OUT:-$(mktemp -d)}
k=$(mktemp -d)
tar xzf "$kit_tgz" -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$k/lib PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
summary() {
  grep '^MLA_SUITE' "$1" | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line.split(" ", 1)[1])
    print(d["op"], d.get("h_q"), d.get("b"), d.get("d_qk"), d.get("kv", ""), round(d.get("flashcpp_us", 0), 1),
          {k: round(v, 4) for k, v in d.items() if k.endswith("_speedup") or k.endswith("_diff") and v})'
}
if [[ $mode == bench ]]; then
  more=""
  for v in $variants; do more+=" $v=$k/$v/libflashcpp.so"; done
  # shellcheck disable=SC2086
  timeout 90 python3 bench/flashmla_side_by_side.py --lib "$k/head/libflashcpp.so" --op dense --iters 10 --no-host-time \
    --no-flashinfer --filter "dense tp" "s_q 1 h_q 128 s_k 8192 causal False" --lib-more $more > "$out/dense.txt" 2>&1
  summary "$out/dense.txt"
  # shellcheck disable=SC2086
  timeout 150 python3 bench/flashmla_side_by_side.py --lib "$k/head/libflashcpp.so" --op decode --iters 10 \
    --no-host-time --no-flashinfer --lib-more $more > "$out/decode.txt" 2>&1
  summary "$out/decode.txt"
  for v in head "$tv"; do
    timeout 120 python3 bench/flashmla_side_by_side.py --lib "$k/$v/libflashcpp.so" --op prefill_fp8 --iters 5 \
      --no-host-time > "$out/prefill-fp8-$v.txt" 2>&1
    grep '^MLA_SUITE' "$out/prefill-fp8-$v.txt" | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line.split(" ", 1)[1])
    print("prefill_fp8", "'"$v"'", d["case"], round(d["fp8_us"], 1), round(d["ratio"], 3), d["max_abs_diff"])'
  done
elif [[ $mode == tests ]]; then
  for s in 0 1 2 3 4 5; do
    LD_LIBRARY_PATH=$k/$tv:$LD_LIBRARY_PATH GTEST_TOTAL_SHARDS=6 GTEST_SHARD_INDEX=$s timeout ${TEST_S:-300} \
      "$k/test_mla_gpu" --gtest_filter="${FILTER:-MlaGpuDecode*:MlaGpuDenseDecode*}" > "$out/tests-$s.txt" 2>&1 &
  done
  wait
  for s in 0 1 2 3 4 5; do echo "shard $s: $(grep -cE '^\[       OK' "$out/tests-$s.txt") ok"; grep -E '^\[  (PASSED|FAILED)|FAILED \]' "$out/tests-$s.txt"; done
fi
# `both`: bench, then the tests only where $TEST_VARIANT ran dense FP8 at 16 heads at least 2% faster than head.
if [[ $mode == both ]]; then
  OUT=$out bash "$0" bench
  win=$(grep '^MLA_SUITE' "$out/dense.txt" | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line.split(" ", 1)[1])
    if d["h_q"] == 16 and d["kv"] == "fp8": print(1 if d["'"$tv"'_speedup"] < 0.98 else 0)')
  echo "tests: ${win:-0}"
  if [[ ${win:-0} == 1 ]]; then OUT=$out bash "$0" tests; fi
fi
