#!/usr/bin/env bash
# The thirtieth session's suite calls: FlashMLA's dense, prefill and decode suites beside main's library in one process
# on the same tensors (kit s rebuilt from main: `FLASHCPP_GOLDEN_DIR=<shared data>/flashmla-golden bash
# scripts/mla-variants.sh build build-gpu-full .mla-kit-s head`), with FlashMLA main@9241ae3's package (kit
# .flashmla-kit.tgz: ignored, never committed; built on the GPU machine in the same lease from its source at that
# commit with its CUTLASS submodule, sm_90a only, `python3 setup.py build_ext --inplace`). The dense suite now records
# host time per call too (host_us: one layer's eager run on the step's plan; flashmla_host_us: FlashMLA's call).
#   OPS="dense" bash docs/gpu-runs/2026-12-07/thirtieth-suites.sh   (carry .mla-kit-s.tgz and .flashmla-kit.tgz)
# Then the MLA GPU tests and compute-sanitizer when TESTS=1 (nineteenth-call3-suite.sh's shards and racecheck on the
# prefill kernels, and memcheck and racecheck on the dense pair's graph replay).
set -u
out=${OUT:-$(mktemp -d)}
d=docs/gpu-runs/2026-12-07
if [[ -n ${OPS:-} ]]; then
  OUT=$out bash $d/twentyseventh-suites.sh
fi
if [[ ${TESTS:-0} == 1 ]]; then
  mkdir -p "$out/tests"
  OUT=$out/tests SHARD_S=${SHARD_S:-330} RACE_S=${RACE_S:-300} bash docs/gpu-runs/2026-12-06/nineteenth-call3-suite.sh
  k=$(mktemp -d); tar xzf .mla-kit-s.tgz -C "$k"; k=$k/.mla-kit-s
  for tool in memcheck racecheck; do
    FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$k/head:$k/lib timeout "${SAN_S:-100}" \
      compute-sanitizer --tool $tool --error-exitcode 3 "$k/test_mla_gpu" \
      --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$out/tests/dense-$tool.txt" 2>&1
    echo "$tool exit $?" | tee -a "$out/tests/dense-$tool.txt"
  done
  (cd "$out" && tar czf tests.tgz tests && rm -rf tests)
fi
