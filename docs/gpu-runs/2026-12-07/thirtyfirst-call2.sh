#!/usr/bin/env bash
# The thirty-first session's experiment call: the thirtieth session's two prepared experiments beside main
# in one process on the same tensors (kit a, thirtyfirst-call1.sh's header):
#   tm: the pair launch's tensor map cached; its dense tile counts and graph replay as a gate, then the dense suite's
#       128-head 8K cases with host time, head and tm in turn, twice (host_us should move, the kernels not);
#   erba, spfa: consumer 1's order in every two-tile instantiation, gated on the prefill sweep, strided views and dense
#       tile counts, then FlashMLA's prefill suite (scripts/mla-variants.sh run, both orders).
#   bash docs/gpu-runs/2026-12-07/thirtyfirst-call2.sh   (carry .mla-kit-a.tgz and .flashmla-kit.tgz, FlashMLA
#   main@9241ae3's package; without it, the builds are ranked against head alone)
# As run, this call also built FlashMLA's package on the GPU machine from a source archive; that step is not kept:
# the tree builds no fetched code. Bring the package built there as .flashmla-kit.tgz (.flashmla-kit/flash_mla).
set -u
out=${OUT:-$(mktemp -d)}
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
fm=$(mktemp -d)
if [[ -f .flashmla-kit.tgz ]]; then
  tar xzf .flashmla-kit.tgz -C "$fm"
fi
export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
echo "flashmla ready at $((SECONDS - start)) s"
k=$(mktemp -d); tar xzf .mla-kit-a.tgz -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 PYTHONUNBUFFERED=1 FLASHCPP_GOLDEN_DIR=$k/golden
if [[ ${TM:-1} == 1 ]]; then
  LD_LIBRARY_PATH=$k/tm:$k/lib timeout 120 "$k/test_mla_gpu" \
    --gtest_filter='MlaGpuDenseDecode.EveryTileCountAndCut:MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$out/tm.txt" 2>&1
  if grep -q '^\[  PASSED  \] 2 tests' "$out/tm.txt"; then
    for round in 1 2; do
      for n in head tm; do
        LD_LIBRARY_PATH=$k/lib timeout 100 python3 bench/flashmla_side_by_side.py --lib "$k/$n/libflashcpp.so" --op dense \
          --filter "h_q 128 s_k 8192" --iters 10 --no-flashinfer 2>&1 | grep '^MLA_SUITE' | sed "s/^/$n $round /" >> "$out/tm.txt"
      done
    done
    grep '^head\|^tm' "$out/tm.txt" | python3 -c '
import json, sys
for l in sys.stdin:
    n, rnd, rest = l.split(" ", 2)
    r = json.loads(rest[10:])
    print("%-4s %s %-5s s_q %d causal %-5s ours %.1f us ratio %s host %.1f us (FlashMLA host %s)" % (n, rnd, r["kv"],
          r["s_q"], r["causal"], r["flashcpp_us"], r.get("ratio") and "%.3f" % r["ratio"] or "-", r.get("host_us", 0),
          r.get("flashmla_host_us", "-")))'
  else
    echo "tm failed its gate"; tail -5 "$out/tm.txt"
  fi
fi
left=$(( ${CALL_S:-570} - (SECONDS - start) ))
echo "prefill variants with $left s left"
MLA_VARIANTS_GATE='MlaGpuPrefill.Sweep:MlaGpuPrefill.StridedQueryAndOutput:MlaGpuDenseDecode.EveryTileCountAndCut' \
  OUT=$out MLA_VARIANTS_BUDGET_S=$left bash scripts/mla-variants.sh run .mla-kit-a.tgz prefill head erba spfa -- none
